package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"sort"
	"strings"
	"time"
)

var nan = math.NaN()

// Colours: one per class (the same in the timeline and the score chart),
// and per knowledge-base verdict.
var (
	classColour = map[string]string{
		"web": "#1f77b4", "mail": "#d62728", "fileserver": "#2ca02c", "rfa": "#9467bd",
		"mixed": "#ff7f0e", "idle": "#9e9e9e",
	}
	verdictColour = map[string]string{"best": "#c8e6c9", "worst": "#ffcdd2", "contested": "#ffe0b2", "": "#f5f5f5"}
	palette       = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}
)

func chartHeight(width int) int { return max(160, width/6) }

// render writes the whole page.
func render(r *reportData, width int) []byte {
	var b bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>fspair report</title>
<style>
body { font-family: "DejaVu Sans", Arial, sans-serif; margin: 16px; width: %dpx; color: #212121; font-size: 13px; }
h1 { font-size: 20px; margin: 0 0 4px 0; } h2 { font-size: 16px; margin: 18px 0 6px 0; border-bottom: 1px solid #ccc; }
h3 { font-size: 14px; margin: 10px 0 4px 0; } .sub { color: #616161; }
.grid { display: flex; flex-wrap: wrap; gap: 12px; } .grid > div { width: %dpx; }
table.m { border-collapse: collapse; } table.m td, table.m th { border: 1px solid #bdbdbd; padding: 4px 6px; text-align: center; }
table.m th { background: #eeeeee; font-weight: normal; } .legend span { margin-right: 12px; }
.sw { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
</style></head><body>
`, width-32, (width-48)/2)
	w("<h1>fspair: file-system pairs of the VM disks</h1>\n")
	w(`<div class="sub">%s to %s (UTC), step %s, from %s</div>`+"\n",
		r.from.UTC().Format("2006-01-02 15:04"), r.to.UTC().Format("2006-01-02 15:04"), r.step, html.EscapeString(r.server))

	w("<h2>Fleet: guest FS (rows) x host FS (columns) per workload class</h2>\n")
	w(`<div class="sub legend">Cell colour: the knowledge base's verdict in force on the pair for the class (`)
	for _, v := range []string{"best", "worst", "contested"} {
		w(`<span><span class="sw" style="background:%s"></span>%s</span>`, verdictColour[v], v)
	}
	w(`<span><span class="sw" style="background:%s"></span>not rated</span>). `, verdictColour[""])
	w("Text: \"(site)\" where this site's measured verdict replaced the published one, in italics the other source's " +
		"verdict where the published studies and the site both rated the pair; VM disks the live classifier puts in the " +
		"class on that pair, and their median write amplification (5m).</div>\n")
	w(`<div class="grid">`)
	for _, m := range r.matrices {
		w("<div>")
		renderMatrix(&b, m)
		w("</div>")
	}
	w("</div>\n")
	w("<h3>VM disks on a pair the knowledge base lists as worst for their workload</h3>\n")
	if len(r.worst) == 0 {
		w(`<div class="sub">none</div>` + "\n")
	}
	for _, s := range r.worst {
		l := s.labels
		w("<div>%s/%s on %s: %s on %s/%s (%s); better: %s</div>\n", esc(l["domain"]), esc(l["target_device"]), esc(l["instance"]),
			esc(l["class"]), esc(l["guest_fs"]), esc(l["host_fs"]), esc(verdictSources(l)), esc(l["better_pairs"]))
	}

	d := r.disk
	w("<h2>VM disk %s</h2>\n", esc(d.domain+"/"+d.target))
	w(`<div class="sub">%s on %s: guest %s on host %s, %s, cache=%s</div>`+"\n",
		esc(d.sourceFile), esc(d.instance), esc(d.guestFS), esc(d.hostFS), esc(d.format), esc(d.cache))
	if r.verdict != nil {
		l := r.verdict.labels
		w("<div>Knowledge base (%s): <b>%s</b> pair for %s; better pairs: %s</div>\n",
			esc(verdictSources(l)), esc(l["verdict"]), esc(l["class"]), esc(l["better_pairs"]))
	} else {
		w(`<div class="sub">Knowledge base: no verdict on this pair for its current class.</div>` + "\n")
	}
	w("<h3>Workload class over time</h3>\n")
	b.WriteString(timeline(r.class, r.from, r.to, r.step, width-32))
	for _, p := range r.panels {
		w("<h3>%s</h3><div class=\"sub\">%s</div>\n", esc(p.title), esc(p.help))
		b.WriteString(chart(p, r.from, r.to, width-32, chartHeight(width)))
	}
	w("</body></html>\n")
	return b.Bytes()
}

func esc(s string) string { return html.EscapeString(s) }

// verdictSources names the source of a verdict series' verdict, and where
// the published studies and the site disagree on the pair, the other's
// verdict and which one the rules act on: "site; published: best; the
// rules act on the site's".
func verdictSources(l map[string]string) string {
	other := otherVerdict(l)
	if other == "" {
		return l["source"]
	}
	acting := "the published verdict"
	if l["source"] == "site" {
		acting = "the site's"
	}
	return l["source"] + "; " + other + "; the rules act on " + acting
}

func renderMatrix(b *bytes.Buffer, m matrix) {
	fmt.Fprintf(b, "<h3>%s</h3>", esc(m.class))
	fmt.Fprintf(b, `<table class="m"><tr><th>guest \ host</th>`)
	for _, h := range m.host {
		fmt.Fprintf(b, "<th>%s</th>", esc(h))
	}
	b.WriteString("</tr>")
	for _, g := range m.guest {
		fmt.Fprintf(b, "<tr><th>%s</th>", esc(g))
		for _, h := range m.host {
			c := m.cells[[2]string{g, h}]
			if c == nil {
				fmt.Fprintf(b, `<td style="background:%s"></td>`, verdictColour[""])
				continue
			}
			text := c.verdict
			if c.source == "site" {
				text += " (site)"
			}
			if c.other != "" {
				// Both sources rated the pair: the one in force above,
				// the other below.
				text += "<br><i>" + esc(c.other) + "</i>"
			}
			if c.disks > 0 {
				text += fmt.Sprintf("<br><b>%d VM disk", c.disks)
				if c.disks > 1 {
					text += "s"
				}
				text += "</b>"
				if !math.IsNaN(c.amplification) {
					text += fmt.Sprintf("<br>WA %.2f", c.amplification)
				}
			}
			fmt.Fprintf(b, `<td style="background:%s">%s</td>`, verdictColour[c.verdict], text)
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</table>")
}

// timeline draws the chosen class at each step as a coloured band.
func timeline(ss []series, from, to time.Time, step time.Duration, width int) string {
	const h, top = 28, 4
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%d" xmlns="http://www.w3.org/2000/svg">`, width, h+40)
	n := int(to.Sub(from)/step) + 1
	x := func(i int) float64 { return 60 + float64(i)*float64(width-70)/float64(n) }
	seen := map[string]bool{}
	for _, s := range ss {
		class := s.labels["class"]
		for i, v := range s.v {
			if v == 1 {
				seen[class] = true
				fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`, x(i), top, x(i+1)-x(i)+0.5, h, colourOf(class, 0))
			}
		}
	}
	fmt.Fprintf(&b, `<rect x="60" y="%d" width="%d" height="%d" fill="none" stroke="#9e9e9e"/>`, top, width-70, h)
	timeAxis(&b, from, to, 60, width-10, top+h)
	b.WriteString("</svg>")
	b.WriteString(`<div class="legend">`)
	for _, c := range classes {
		if seen[c] {
			fmt.Fprintf(&b, `<span><span class="sw" style="background:%s"></span>%s</span>`, classColour[c], c)
		}
	}
	if len(seen) == 0 {
		b.WriteString(`<span class="sub">no class recorded in this range</span>`)
	}
	b.WriteString("</div>\n")
	return b.String()
}

func colourOf(name string, i int) string {
	if c, ok := classColour[name]; ok {
		return c
	}
	return palette[i%len(palette)]
}

// chart draws a panel's series as lines; gaps (NaN) break the line.
func chart(p panel, from, to time.Time, width, height int) string {
	const left, right, top, bottom = 60, 10, 6, 22
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range p.series {
		for _, v := range s.v {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%d" xmlns="http://www.w3.org/2000/svg">`, width, height)
	plotW, plotH := float64(width-left-right), float64(height-top-bottom)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="#fafafa" stroke="#bdbdbd"/>`, left, top, plotW, plotH)
	if math.IsInf(lo, 1) {
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" fill="#757575">no data in this range</text></svg>`, left+10, float64(top)+plotH/2)
		return b.String()
	}
	lo = math.Min(lo, 0)
	if hi <= lo {
		hi = lo + 1
	}
	hi *= 1.05
	span := to.Sub(from).Seconds()
	px := func(t time.Time) float64 { return float64(left) + plotW*t.Sub(from).Seconds()/span }
	py := func(v float64) float64 { return float64(top) + plotH*(1-(v-lo)/(hi-lo)) }
	for _, f := range []float64{0, 0.5, 1} {
		v := lo + f*(hi-lo)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e0e0e0"/>`, left, width-right, py(v), py(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" text-anchor="end" fill="#616161">%s</text>`, left-4, py(v)+4, human(v, p.unit))
	}
	timeAxis(&b, from, to, left, width-right, top+int(plotH))
	names := make([]string, len(p.series))
	for i, s := range p.series {
		names[i] = p.legend(s.labels)
	}
	order := make([]int, len(p.series))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, c int) bool { return names[order[a]] < names[order[c]] })
	var legend strings.Builder
	for k, i := range order {
		s := p.series[i]
		col := colourOf(names[i], k)
		var pts []string
		flush := func() {
			if len(pts) == 1 {
				pts = append(pts, pts[0])
			}
			if len(pts) > 0 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>`, col, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for j, v := range s.v {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.t[j]), py(v)))
		}
		flush()
		fmt.Fprintf(&legend, `<span><span class="sw" style="background:%s"></span>%s</span>`, col, esc(names[i]))
	}
	b.WriteString("</svg>")
	return b.String() + `<div class="legend">` + legend.String() + "</div>\n"
}

// timeAxis labels the start, middle and end of the range.
func timeAxis(b *strings.Builder, from, to time.Time, x0, x1, y int) {
	for _, f := range []float64{0, 0.5, 1} {
		t := from.Add(time.Duration(f * float64(to.Sub(from))))
		anchor := map[float64]string{0: "start", 0.5: "middle", 1: "end"}[f]
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="11" text-anchor="%s" fill="#616161">%s</text>`,
			float64(x0)+f*float64(x1-x0), y+15, anchor, t.UTC().Format("15:04"))
	}
}

// human formats an axis value with its unit: seconds as s/ms/us, bytes as
// B/KiB/MiB, others with up to three significant digits.
func human(v float64, unit string) string {
	a := math.Abs(v)
	switch unit {
	case "s":
		switch {
		case a == 0:
			return "0"
		case a < 1e-3:
			return fmt.Sprintf("%.3g us", v*1e6)
		case a < 1:
			return fmt.Sprintf("%.3g ms", v*1e3)
		}
		return fmt.Sprintf("%.3g s", v)
	case "B":
		switch {
		case a >= 1<<20:
			return fmt.Sprintf("%.3g MiB", v/(1<<20))
		case a >= 1<<10:
			return fmt.Sprintf("%.3g KiB", v/(1<<10))
		}
		return fmt.Sprintf("%.3g B", v)
	}
	return fmt.Sprintf("%.3g%s", v, unit)
}
