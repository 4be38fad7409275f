// Package ports serves benchmark runs over HTTP: the bearer-protected admin
// routes under /admin/benchmarks (JSON, and an SVG chart of a finished run)
// and the admin page at /admin/ (an HTML shell without data, whose inline
// script reads the token from the URL fragment or an input box and calls
// the JSON routes). Nothing is loaded from outside the scheduler.
package ports
