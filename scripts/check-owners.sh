#!/usr/bin/env bash
# check-owners.sh: every table has one owner (make lint). It fails when
#  - a Go file outside the scheduler's store (services/scheduler/internal/adapters)
#    writes or defines notification_targets, target_due or templates (INSERT, REPLACE,
#    UPDATE, DELETE, CREATE/ALTER/DROP/TRUNCATE TABLE). The scheduler's own tests
#    (services/scheduler/**/*_test.go) may stage states the API cannot reach
#    (a target fired behind the API's back, tables reset between benchmark
#    iterations); production code and every other module's tests may not;
#  - any tracked file outside the sink's migrations
#    (services/sink/notifications/migrations.go) creates or alters the
#    notifications or inbox_entries table: one definition, no copy to drift. The
#    exceptions are the sink's write benchmark
#    (services/sink/internal/adapters/bench_test.go), which drops one part
#    of a migrated scratch table at a time to measure what that part costs,
#    and the migrations' own test (services/sink/notifications/migrations_test.go),
#    which builds the half-done states an interrupted migration leaves.
# It is a text check: SQL built by an ORM from a model is not seen (the one
# gorm model of notification_targets lives in the scheduler's store).
set -euo pipefail
cd "$(dirname "$0")/.."

targets_owner='^services/scheduler/internal/adapters/[^/]+\.go$'
targets_tests='^services/scheduler/.*_test\.go$'
notifications_owner='^services/sink/notifications/migrations(_test)?\.go$'
notifications_bench='^services/sink/internal/adapters/bench_test\.go$'

verbs='(INSERT([[:space:]]+IGNORE)?([[:space:]]+INTO)?|REPLACE([[:space:]]+INTO)?|UPDATE|DELETE([[:space:]]+[[:alnum:]_]+)?[[:space:]]+FROM|(CREATE|ALTER|DROP|TRUNCATE)[[:space:]]+TABLE([[:space:]]+IF[[:space:]]+(NOT[[:space:]]+)?EXISTS)?)'
targets_re="${verbs}[[:space:]]+\`?(notification_targets|target_due|templates)\`?([^[:alnum:]_]|\$)"
notifications_re='(CREATE|ALTER)[[:space:]]+TABLE([[:space:]]+IF[[:space:]]+NOT[[:space:]]+EXISTS)?[[:space:]]+`?(notifications|inbox_entries)`?([^[:alnum:]_]|$)'

fail=0
while IFS= read -r hit; do
	file=${hit%%:*}
	[[ $file =~ $targets_owner || $file =~ $targets_tests ]] && continue
	echo "$hit"
	fail=1
done < <(git ls-files --cached --others --exclude-standard -- '*.go' | xargs -r grep -nEiH "$targets_re" || true)
if [ "$fail" -ne 0 ]; then
	echo "^ only the scheduler's store (services/scheduler/internal/adapters) writes notification_targets and target_due: call its application layer (app.Targets, app.Runs)"
fi

nfail=0
while IFS= read -r hit; do
	file=${hit%%:*}
	[[ $file =~ $notifications_owner || $file =~ $notifications_bench ]] && continue
	echo "$hit"
	nfail=1
done < <(git ls-files --cached --others --exclude-standard | grep -v '^scripts/check-owners\.sh$' | xargs -r grep -nEiIH "$notifications_re" || true)
if [ "$nfail" -ne 0 ]; then
	echo "^ the notifications and inbox_entries tables are defined once, in services/sink/notifications/migrations.go: apply those migrations (notifications.Migrate)"
fi
exit $((fail | nfail))
