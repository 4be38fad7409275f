// Package benchreport is the JSON format of a benchmark run's progress and
// report: the scheduler's admin API (GET /admin/benchmarks/{id}) writes it,
// the bench harness reads it. Both use these types, so the format has one
// definition.
package benchreport
