# syntax=docker/dockerfile:1
#
# The image of every notiflow service: a static, non-root, distroless image
# of the service named by the build argument SERVICE, documenting its
# default HTTP port PORT. The build context is the repository root, because
# each service's go.mod replaces modules in sibling folders (../../lib,
# ../../proto; the scheduler's also ../sink, for the sink's package
# notifications):
#
#   docker build --build-arg SERVICE=scheduler  --build-arg PORT=8080 -t notiflow/scheduler .
#   docker build --build-arg SERVICE=dispatcher --build-arg PORT=8081 -t notiflow/dispatcher .
#   docker build --build-arg SERVICE=sink       --build-arg PORT=8082 -t notiflow/sink .
#
# The binary writes nothing to the filesystem, so the container runs with a
# read-only root filesystem (compose: read_only; Kubernetes:
# readOnlyRootFilesystem). Configuration: NOTIFLOW_* environment variables.

FROM golang:1.26 AS build
ARG SERVICE
ARG PORT
WORKDIR /src
ENV CGO_ENABLED=0 GOWORK=off
# Module files first: the download layer stays cached while only code
# changes. Every module of the repository that a service's go.mod may
# replace is here, so each service builds from its own go.mod alone.
COPY lib/go.mod lib/go.sum lib/
COPY proto/go.mod proto/go.sum proto/
COPY services/scheduler/go.mod services/scheduler/go.sum services/scheduler/
COPY services/dispatcher/go.mod services/dispatcher/go.sum services/dispatcher/
COPY services/sink/go.mod services/sink/go.sum services/sink/
RUN test -n "${PORT}" && test -f "services/${SERVICE}/go.mod" || \
    { echo "build with --build-arg SERVICE=<scheduler|dispatcher|sink> --build-arg PORT=<its HTTP port>" >&2; exit 1; }
RUN --mount=type=cache,target=/root/go/pkg/mod \
    cd services/${SERVICE} && go mod download
COPY lib/ lib/
COPY proto/ proto/
COPY services/ services/
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    cd services/${SERVICE} && go build -trimpath -ldflags="-s -w" -o /out/${SERVICE} .
# The health probe for docker compose (distroless has no shell or curl):
# one standard-library file, built outside any module.
COPY deploy/healthcheck/main.go /src/healthcheck/main.go
RUN --mount=type=cache,target=/root/.cache/go-build \
    cd /src/healthcheck && go build -trimpath -ldflags="-s -w" -o /out/healthcheck main.go

FROM gcr.io/distroless/static-debian12:nonroot
ARG SERVICE
ARG PORT
# One fixed path for every service, because an exec-form ENTRYPOINT takes
# no build arguments; the image's name says which service it holds.
COPY --from=build /out/${SERVICE} /usr/local/bin/notiflow
COPY --from=build /out/healthcheck /usr/local/bin/healthcheck
USER 65532:65532
EXPOSE ${PORT}
ENTRYPOINT ["/usr/local/bin/notiflow"]
