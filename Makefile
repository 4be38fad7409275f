# notiflow: one entry point for building, testing and running.
# Every target works from a fresh clone; `make test` installs and starts the
# real Kafka, MariaDB and Redis it needs (scripts/deps.sh).

SHELL := /bin/bash
GO ?= go
MODULES := lib proto services/scheduler services/dispatcher services/sink bench deploy
STATICCHECK_VERSION := v0.8.2
TEST_FLAGS ?= -race -count=1 -timeout 20m
TEST_ENV = NOTIFLOW_TEST_KAFKA=127.0.0.1:9092 \
	NOTIFLOW_TEST_MYSQL_DSN='notiflow:notiflow@tcp(127.0.0.1:3306)/notiflow?parseTime=true&loc=UTC' \
	NOTIFLOW_TEST_REDIS=127.0.0.1:6379

.PHONY: all deps deps-down deps-status build test test-tools lint docs-check proto proto-check bench bench-compare bench-inbox bench-tool demo test-chaos \
	k8s-up k8s-down k8s-status k8s-images k8s-smoke test-k8s

# Benchmark knobs: make bench NOTIFICATIONS=20000 DISPATCHERS=3 ORDERING=partition CHANNEL=webhook
NOTIFICATIONS ?= 100000
RECIPIENTS ?= 10000
PARTITIONS ?= 12
DISPATCHERS ?= 2
WORKERS ?= 0
ORDERING ?= key
SINK_BATCH ?= 200
SINK_IDLE ?= 1s
SINK_NAIVE ?= false
CHANNEL ?= sim
SIM_LATENCY ?= 2ms
# CHANNEL=webhook: the local receiver answers each call after RECEIVER_DELAY (the sim latency unless set)
RECEIVER_DELAY ?= $(SIM_LATENCY)
# KEEP=true leaves a run's database (nf_bench_<time>) and Redis keys (nf:bench_<time>:*) in place after it (a failed run always does)
KEEP ?= false
# PROFILE=dir leaves a CPU profile of every service (the first PROFILE_SECONDS of the run window) and a summary of MariaDB's statements in dir
PROFILE ?=
PROFILE_SECONDS ?= 5s
BENCH_ARGS = -notifications $(NOTIFICATIONS) -recipients $(RECIPIENTS) -partitions $(PARTITIONS) \
	-dispatchers $(DISPATCHERS) -workers $(WORKERS) -ordering $(ORDERING) -sink-batch $(SINK_BATCH) \
	-sink-idle $(SINK_IDLE) -sink-naive=$(SINK_NAIVE) -channel $(CHANNEL) -sim-latency $(SIM_LATENCY) \
	-receiver-delay $(RECEIVER_DELAY) -keep=$(KEEP) -profile '$(PROFILE)' -profile-seconds $(PROFILE_SECONDS)

all: build

## deps: install (if missing) and start Kafka 4.1, MariaDB and Redis on 127.0.0.1
deps:
	@scripts/deps.sh up

## deps-down: stop what `make deps` started
deps-down:
	@scripts/deps.sh down

deps-status:
	@scripts/deps.sh status

## build: build every module and the three service binaries into bin/
build:
	@for m in $(MODULES); do (cd $$m && $(GO) build ./...) || exit 1; done
	@mkdir -p bin
	@for s in scheduler dispatcher sink; do (cd services/$$s && $(GO) build -o ../../bin/$$s .) || exit 1; done

## test-tools: install what tests need beyond Go and the dependencies: Debian's chromium
## (the scheduler's admin page test drives it headless); needs root and apt-get
test-tools:
	@test -x /usr/bin/chromium || { echo "installing chromium (apt-get)"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y chromium >/dev/null || \
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium >/dev/null; }; }

## test: start the dependencies, then run every test of every module against them
test: deps test-tools
	@for m in $(MODULES); do \
		echo "== go test $$m"; \
		(cd $$m && $(TEST_ENV) $(GO) test $(TEST_FLAGS) ./...) || exit 1; \
	done

## lint: gofmt, no production Go file over 500 lines, go vet, staticcheck, same Go version everywhere,
## fresh protobuf code, one owner per table (scripts/check-owners.sh), docs that state the present,
## the workspace and the GOWORK=off image builds on the same dependency versions (scripts/check-workspace-versions.sh)
lint: proto-check docs-check
	@scripts/check-owners.sh
	@scripts/check-workspace-versions.sh
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@scripts/filelength.sh $(MODULES)
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	@test -x .deps/bin/staticcheck || GOBIN=$(CURDIR)/.deps/bin GOWORK=off $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@for m in $(MODULES); do (cd $$m && $(CURDIR)/.deps/bin/staticcheck ./...) || exit 1; done
	@v=$$(for m in $(MODULES); do grep -m1 '^go ' $$m/go.mod; done | sort -u); \
		if [ $$(echo "$$v" | wc -l) -ne 1 ]; then echo "go.mod files name different Go versions: $$v"; exit 1; fi

## proto: regenerate the Go code of the event contract
proto:
	@scripts/proto.sh

proto-check:
	@scripts/proto.sh --check

## docs-check: no commit ids, work-period or machine labels, or out-of-repo pointers in the docs
docs-check:
	@scripts/check-docs.sh

## bench: end-to-end benchmark through the admin endpoint (bench/results/latest.json)
bench: bench-tool
	@bin/notiflow-bench run $(BENCH_ARGS)

## bench-compare: naive vs tuned configuration in one invocation (bench/results/compare-latest.json)
bench-compare: bench-tool
	@bin/notiflow-bench compare $(BENCH_ARGS)

## bench-inbox: p50/p90/p99 of a recipient's first inbox page at a constant rate against a real sink over a
## seeded 1M-row table (seeded once, reused; bench/results/inbox-latest.json).
## Knobs: make bench-inbox INBOX_ARGS='-rate 1000 -duration 30s -unread-count -reseed'
INBOX_ARGS ?=
bench-inbox: bench-tool
	@bin/notiflow-bench inbox $(INBOX_ARGS)

## demo: deps + the three services + sample targets + a benchmark; Ctrl-C stops everything
demo: bench-tool
	@bin/notiflow-bench demo $(BENCH_ARGS)

# bench-tool builds the driver of bench, bench-compare and demo (a binary
# rather than go run, so that Ctrl-C reaches it directly and it exits 0).
bench-tool:
	@mkdir -p bin && cd bench && $(GO) build -o ../bin/notiflow-bench ./cmd/notiflow-bench

## test-chaos: every fault-injection scenario and the fence end-to-end tests against the running trio (bench/results/chaos-latest.json)
test-chaos: deps
	@set -o pipefail; cd bench && $(TEST_ENV) NOTIFLOW_CHAOS=all $(GO) test -count=1 -timeout 90m -run 'TestChaos|TestCancel|TestPatchEndToEnd' -v ./chaos/ 2>&1 | grep -v '^=== '

## k8s-up: a single-node Kubernetes on this machine (needs root): builds Kubernetes from the Go module proxy
## once (cached in .deps/k8s, ~7 min cold), starts it with the service images imported; kubeconfig .deps/k8s/kubeconfig.
## See deploy/k8s/README.md, "Local cluster".
k8s-up:
	@scripts/k8s-local.sh up

## k8s-down: stop the local cluster by pid, undo its host changes (bridge, mounts, iptables chains, sysctls, paths)
## and check that nothing is left
k8s-down:
	@scripts/k8s-local.sh down

## k8s-status: each local-cluster component, the node and the images in the node's containerd
k8s-status:
	@scripts/k8s-local.sh status

## k8s-images: rebuild the images (services from the Dockerfile, dependencies from the host's files) and import them into the running node
k8s-images:
	@scripts/k8s-local.sh images

## k8s-smoke: on the running local cluster: a Deployment of the dispatcher image with imagePullPolicy Never
## until Ready, then KEDA's CRDs and a server-side dry-run apply of every overlay in deploy/k8s/overlays
k8s-smoke:
	@scripts/k8s-local/smoke.sh

## test-k8s: notiflow on the local cluster as an operator runs it: apply the local overlay (Kafka, MariaDB,
## Redis inside), three benchmark runs through a port-forward (1 dispatcher; scaled to 3, all in the group;
## one deleted mid-run), then KEDA built and installed and overlays/local-keda: a 60,000 run scales out to 3, the
## drained lag scales back to 1, a fifth run; lost 0 and duplicates 0 each, every overlay dry-run server-side.
## Starts the cluster if it is not running and then stops it (checking the host is clean). Writes
## bench/results/k8s-latest.json.
test-k8s:
	@scripts/k8s-local/test.sh
