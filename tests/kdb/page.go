package main

import (
	"fmt"
	"html"
	"strings"
)

// doc is the report as a list of blocks, rendered twice: Markdown for the
// repository and HTML for a browser. Text may hold `code` spans and
// **bold**; nothing else is interpreted.
type doc []any

type (
	heading struct {
		level int
		text  string
	}
	para  string
	items []string
	table struct {
		head  []string
		right []bool // right-aligned columns (figures)
		rows  [][]string
	}
	figure struct{ alt, src string }
	code   string
)

// markdown renders d as GitHub-flavoured Markdown.
func (d doc) markdown() string {
	var b strings.Builder
	for _, blk := range d {
		switch x := blk.(type) {
		case heading:
			fmt.Fprintf(&b, "%s %s\n\n", strings.Repeat("#", x.level), x.text)
		case para:
			fmt.Fprintf(&b, "%s\n\n", x)
		case items:
			for _, it := range x {
				fmt.Fprintf(&b, "- %s\n", it)
			}
			b.WriteString("\n")
		case table:
			b.WriteString("|")
			for _, h := range x.head {
				fmt.Fprintf(&b, " %s |", mdCell(h))
			}
			b.WriteString("\n|")
			for i := range x.head {
				if i < len(x.right) && x.right[i] {
					b.WriteString("---:|")
				} else {
					b.WriteString("---|")
				}
			}
			b.WriteString("\n")
			for _, row := range x.rows {
				b.WriteString("|")
				for _, c := range row {
					fmt.Fprintf(&b, " %s |", mdCell(c))
				}
				b.WriteString("\n")
			}
			b.WriteString("\n")
		case figure:
			fmt.Fprintf(&b, "![%s](%s)\n\n", x.alt, x.src)
		case code:
			fmt.Fprintf(&b, "```sh\n%s\n```\n\n", strings.TrimRight(string(x), "\n"))
		}
	}
	return b.String()
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// htmlPage renders d as a self-contained HTML page (the images are the
// PNG files beside it).
func (d doc) htmlPage(title string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>%s</title>\n", html.EscapeString(title))
	b.WriteString(`<style>
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #202020; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; }
th { background: #f1f6fb; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { background: #f4f4f4; }
pre { padding: 0.5em; overflow-x: auto; }
img { max-width: 100%; }
</style>
</head>
<body>
`)
	for _, blk := range d {
		switch x := blk.(type) {
		case heading:
			fmt.Fprintf(&b, "<h%d>%s</h%d>\n", x.level, inline(x.text), x.level)
		case para:
			fmt.Fprintf(&b, "<p>%s</p>\n", inline(string(x)))
		case items:
			b.WriteString("<ul>\n")
			for _, it := range x {
				fmt.Fprintf(&b, "<li>%s</li>\n", inline(it))
			}
			b.WriteString("</ul>\n")
		case table:
			b.WriteString("<table>\n<thead><tr>")
			for _, h := range x.head {
				fmt.Fprintf(&b, "<th>%s</th>", inline(h))
			}
			b.WriteString("</tr></thead>\n<tbody>\n")
			for _, row := range x.rows {
				b.WriteString("<tr>")
				for i, c := range row {
					if i < len(x.right) && x.right[i] {
						fmt.Fprintf(&b, "<td class=\"num\">%s</td>", inline(c))
					} else {
						fmt.Fprintf(&b, "<td>%s</td>", inline(c))
					}
				}
				b.WriteString("</tr>\n")
			}
			b.WriteString("</tbody>\n</table>\n")
		case figure:
			fmt.Fprintf(&b, "<p><img src=\"%s\" alt=\"%s\"></p>\n", html.EscapeString(x.src), html.EscapeString(x.alt))
		case code:
			fmt.Fprintf(&b, "<pre><code>%s</code></pre>\n", html.EscapeString(strings.TrimRight(string(x), "\n")))
		}
	}
	b.WriteString("</body>\n</html>\n")
	return b.String()
}

// inline escapes s for HTML and turns `code` spans into <code>.
func inline(s string) string {
	parts := strings.Split(s, "`")
	var b strings.Builder
	for i, p := range parts {
		e := html.EscapeString(p)
		if i%2 == 1 && i < len(parts)-1 {
			b.WriteString("<code>" + e + "</code>")
		} else {
			if i%2 == 1 { // an unmatched backtick
				b.WriteString("`")
			}
			b.WriteString(bold(e))
		}
	}
	return b.String()
}

// bold turns **x** into <b>x</b>; an unmatched ** stays as it is.
func bold(s string) string {
	parts := strings.Split(s, "**")
	var b strings.Builder
	for i, p := range parts {
		switch {
		case i%2 == 1 && i < len(parts)-1:
			b.WriteString("<b>" + p + "</b>")
		case i%2 == 1:
			b.WriteString("**" + p)
		default:
			b.WriteString(p)
		}
	}
	return b.String()
}
