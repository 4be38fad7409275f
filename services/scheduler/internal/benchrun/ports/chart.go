package ports

import (
	"fmt"
	"html"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/notiflow/notiflow/services/scheduler/internal/benchrun/domain"
)

// Chart geometry (SVG user units).
const (
	chartW      = 860
	chartH      = 540 // plus 16 per lag group (legend)
	plotLeft    = 80
	plotRight   = 840
	panel1Top   = 60
	panel1Bot   = 250
	panel2Top   = 320
	panel2Bot   = 490
	barColor    = "#4e79a7"
	axisColor   = "#555"
	gridColor   = "#ddd"
	xTickTarget = 10
	yTicks      = 4
)

var lagColors = []string{"#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2"}

// RenderChart draws a finished run's series as one SVG document: rows
// persisted per second as bars (class "persisted-bar") above, consumer lag
// over time as one polyline per group (class "lag-line", data-group=<group>)
// below, both against seconds since the due time, with axes, ticks and a
// legend. Colours are presentation attributes (no style attributes, so a
// strict Content-Security-Policy does not affect it).
func RenderChart(run domain.Run) string {
	var series domain.Series
	if run.Report != nil && run.Report.Series != nil {
		series = *run.Report.Series
	}
	pps := series.PersistedPerSecond
	groups := lagGroups(series.Lag)

	xMax := float64(len(pps))
	for _, p := range series.Lag {
		xMax = math.Max(xMax, p.T)
	}
	xStep, xMax := axisScale(math.Max(xMax, 1), xTickTarget)
	var ppsMax, lagMax int64
	for _, n := range pps {
		ppsMax = max(ppsMax, n)
	}
	for _, p := range series.Lag {
		for _, n := range p.Lag {
			lagMax = max(lagMax, n)
		}
	}
	y1Step, y1Max := axisScale(math.Max(float64(ppsMax), 1), yTicks)
	y2Step, y2Max := axisScale(math.Max(float64(lagMax), 1), yTicks)
	height := chartH + 16*len(groups)
	x := func(t float64) float64 { return plotLeft + (plotRight-plotLeft)*t/xMax }
	y1 := func(v float64) float64 { return panel1Bot - (panel1Bot-panel1Top)*v/y1Max }
	y2 := func(v float64) float64 { return panel2Bot - (panel2Bot-panel2Top)*v/y2Max }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="benchmark-chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-labelledby="chart-title" font-family="sans-serif" font-size="12">`,
		chartW, height, chartW, height)
	title := "benchmark run " + run.ID
	if r := run.Report; r != nil {
		title = fmt.Sprintf("run %s: %d notifications, %.0f msgs/s, total %.3f s, lost %d, duplicates %d",
			shortID(run.ID), r.Eligible, r.MsgsPerSecond, r.TotalSec, r.Lost, r.Duplicates)
	}
	fmt.Fprintf(&b, `<title id="chart-title">%s</title>`, html.EscapeString(title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#fff"/>`, chartW, height)
	fmt.Fprintf(&b, `<text class="chart-title" x="%d" y="22" font-size="14" font-weight="bold">%s</text>`, plotLeft, html.EscapeString(title))

	// Panel 1: rows persisted per second.
	panel(&b, "rows persisted per second", panel1Top, panel1Bot, y1Step, y1Max, y1, x, xStep, xMax)
	bw := x(1) - x(0)
	gap := math.Min(1, bw/4)
	b.WriteString(`<g class="persisted">`)
	for i, n := range pps {
		fmt.Fprintf(&b, `<rect class="persisted-bar" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>second %d: %d rows</title></rect>`,
			num(x(float64(i))+gap/2), num(y1(float64(n))), num(math.Max(bw-gap, 0.5)), num(panel1Bot-y1(float64(n))), barColor, i, n)
	}
	b.WriteString(`</g>`)

	// Panel 2: consumer lag per group.
	panel(&b, "consumer lag (records)", panel2Top, panel2Bot, y2Step, y2Max, y2, x, xStep, xMax)
	b.WriteString(`<g class="lag">`)
	for gi, g := range groups {
		var pts []string
		for _, p := range series.Lag {
			if n, ok := p.Lag[g]; ok {
				pts = append(pts, num(x(p.T))+","+num(y2(float64(n))))
			}
		}
		color := lagColors[gi%len(lagColors)]
		fmt.Fprintf(&b, `<polyline class="lag-line" data-group="%s" fill="none" stroke="%s" stroke-width="2" points="%s"><title>%s</title></polyline>`,
			html.EscapeString(g), color, strings.Join(pts, " "), html.EscapeString("lag of "+g))
		// Legend, below the x axis label.
		ly := chartH + 4 + gi*16
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`, plotLeft, ly, plotLeft+20, ly, color)
		fmt.Fprintf(&b, `<text class="legend" x="%d" y="%d">%s</text>`, plotLeft+26, ly+4, html.EscapeString(g+" (peak "+compact(float64(peak(series.Lag, g)))+")"))
	}
	b.WriteString(`</g>`)
	fmt.Fprintf(&b, `<text class="axis-label" x="%d" y="%d" text-anchor="middle">seconds since the due time</text>`, (plotLeft+plotRight)/2, panel2Bot+38)
	b.WriteString(`</svg>`)
	return b.String()
}

// panel draws a panel's title, horizontal grid with y tick labels, and x
// axis with ticks.
func panel(b *strings.Builder, title string, top, bot int, yStep, yMax float64, y func(float64) float64, x func(float64) float64, xStep, xMax float64) {
	fmt.Fprintf(b, `<text class="panel-title" x="%d" y="%d" font-weight="bold">%s</text>`, plotLeft, top-10, html.EscapeString(title))
	for v := 0.0; v <= yMax*(1+1e-9); v += yStep {
		fmt.Fprintf(b, `<line class="grid" x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s"/>`, plotLeft, num(y(v)), plotRight, num(y(v)), gridColor)
		fmt.Fprintf(b, `<text class="tick" x="%d" y="%s" text-anchor="end">%s</text>`, plotLeft-6, num(y(v)+4), compact(v))
	}
	fmt.Fprintf(b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`, plotLeft, top, plotLeft, bot, axisColor)
	fmt.Fprintf(b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`, plotLeft, bot, plotRight, bot, axisColor)
	for t := 0.0; t <= xMax*(1+1e-9); t += xStep {
		fmt.Fprintf(b, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="%s"/>`, num(x(t)), bot, num(x(t)), bot+5, axisColor)
		fmt.Fprintf(b, `<text class="tick" x="%s" y="%d" text-anchor="middle">%s</text>`, num(x(t)), bot+18, compact(t))
	}
}

func lagGroups(points []domain.LagPoint) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range points {
		for g := range p.Lag {
			if !seen[g] {
				seen[g] = true
				out = append(out, g)
			}
		}
	}
	sort.Strings(out)
	return out
}

// axisScale returns a tick step (1, 2 or 5 times a power of ten) giving at
// most about ticks ticks up to v, and the axis end: v rounded up to a step.
func axisScale(v float64, ticks int) (step, end float64) {
	step = niceCeil(v / float64(ticks))
	return step, math.Ceil(v/step-1e-9) * step
}

func peak(points []domain.LagPoint, group string) int64 {
	var m int64
	for _, p := range points {
		m = max(m, p.Lag[group])
	}
	return m
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// compact formats a tick value: 1500 -> 1.5k, 2000000 -> 2M, 0.5 -> 0.5.
func compact(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}

func num(f float64) string { return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64) }

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
