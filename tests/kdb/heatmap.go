package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"strings"

	"github.com/fspair/fspair/tests/workload"
)

// Heatmap geometry: a 3x3 grid, guest file system down, host file system
// across, with a title above and a colour scale below. Labels are drawn at
// twice the font's size.
const (
	heatScale  = 2
	heatCellW  = 180
	heatCellH  = 110
	heatLeft   = 140 // row labels
	heatTop    = 80  // title, subtitle, column labels
	heatBottom = 60  // colour scale
	heatRight  = 20
	heatLine   = 18 // line pitch inside a cell
)

// HeatmapSize is the size in pixels of every heatmap image.
func HeatmapSize() (w, h int) {
	n := len(FileSystems)
	return heatLeft + n*heatCellW + heatRight, heatTop + n*heatCellH + heatBottom
}

var (
	heatBG      = color.RGBA{0xff, 0xff, 0xff, 0xff}
	heatInk     = color.RGBA{0x20, 0x20, 0x20, 0xff}
	heatPaper   = color.RGBA{0xff, 0xff, 0xff, 0xff}
	heatNone    = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	heatGrid    = color.RGBA{0xff, 0xff, 0xff, 0xff}
	heatLow     = color.RGBA{0xf1, 0xf6, 0xfb, 0xff} // slowest pair measured
	heatHigh    = color.RGBA{0x1c, 0x4f, 0x8a, 0xff} // fastest pair measured
	heatDarkInk = 0.55                               // above this shade, white text
)

// shade is the colour for t in [0, 1] between heatLow and heatHigh: one
// hue, so that it reads the same to colour-blind readers and in grey.
func shade(t float64) color.RGBA {
	t = min(max(t, 0), 1)
	mix := func(a, b uint8) uint8 { return uint8(float64(a) + t*(float64(b)-float64(a)) + 0.5) }
	return color.RGBA{mix(heatLow.R, heatHigh.R), mix(heatLow.G, heatHigh.G), mix(heatLow.B, heatHigh.B), 0xff}
}

// Heatmap draws one workload's 3x3 matrix: each measured pair's median fio
// throughput (shaded from the slowest to the fastest pair measured), its
// rank, the site's verdict and the published one. subtitle says the
// conditions (format, cache, repeats).
func Heatmap(w workload.Workload, ranked []Ranked, pub *Published, subtitle string) *image.RGBA {
	W, H := HeatmapSize()
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	draw.Draw(img, img.Bounds(), &image.Uniform{heatBG}, image.Point{}, draw.Src)

	byPair := map[string]Ranked{}
	lo, hi := 0.0, 0.0
	for i, r := range ranked {
		byPair[r.Pair] = r
		m := r.Estimate
		if i == 0 || m < lo {
			lo = m
		}
		if i == 0 || m > hi {
			hi = m
		}
	}

	drawText(img, 10, 8, fitText(strings.ToUpper(string(w))+": FIO THROUGHPUT BY GUEST/HOST PAIR", W-20, heatScale), heatScale, heatInk)
	drawText(img, 10, 30, fitText(subtitle, W-20, 1), 1, heatInk)
	drawText(img, 10, heatTop-textHeight(heatScale)-8, "GUEST/HOST", heatScale, heatInk)
	for j, h := range FileSystems {
		drawTextCentered(img, heatLeft+j*heatCellW+heatCellW/2, heatTop-textHeight(heatScale)-8, h, heatScale, heatInk)
	}
	for i, g := range FileSystems {
		y0 := heatTop + i*heatCellH
		drawText(img, 10, y0+heatCellH/2-textHeight(heatScale)/2, g, heatScale, heatInk)
		for j, h := range FileSystems {
			x0 := heatLeft + j*heatCellW
			cell := image.Rect(x0+1, y0+1, x0+heatCellW-1, y0+heatCellH-1)
			pair := g + "/" + h
			r, ok := byPair[pair]
			pv := pub.Verdict(w, pair)
			lines := []string{}
			bg, ink := heatNone, color.Color(heatInk)
			if ok {
				t := 1.0
				if hi > lo {
					t = (r.Estimate - lo) / (hi - lo)
				}
				bg = shade(t)
				if t > heatDarkInk {
					ink = heatPaper
				}
				lines = append(lines,
					mbps(r.Estimate)+" MB/S",
					fmt.Sprintf("RANK %d/%d", r.Rank, r.Of),
					"SITE "+verdictLabel(r.Verdict, r.Standout, "-"))
			} else {
				lines = append(lines, "NOT MEASURED", "")
			}
			lines = append(lines, "PUB "+verdictLabel(pv.Verdict, pv.Standout, "-"))
			draw.Draw(img, cell, &image.Uniform{bg}, image.Point{}, draw.Src)
			top := y0 + (heatCellH-len(lines)*heatLine)/2 + 2
			for k, l := range lines {
				drawTextCentered(img, x0+heatCellW/2, top+k*heatLine, fitText(l, heatCellW-12, heatScale), heatScale, ink)
			}
		}
	}
	// Grid lines between the cells.
	for k := 0; k <= len(FileSystems); k++ {
		x := heatLeft + k*heatCellW
		y := heatTop + k*heatCellH
		draw.Draw(img, image.Rect(x-1, heatTop, x+1, heatTop+len(FileSystems)*heatCellH), &image.Uniform{heatGrid}, image.Point{}, draw.Src)
		draw.Draw(img, image.Rect(heatLeft, y-1, heatLeft+len(FileSystems)*heatCellW, y+1), &image.Uniform{heatGrid}, image.Point{}, draw.Src)
	}

	// Colour scale: slowest to fastest pair measured.
	ys := heatTop + len(FileSystems)*heatCellH + 18
	barX, barW := heatLeft+100, 2*heatCellW-100
	for x := range barW {
		draw.Draw(img, image.Rect(barX+x, ys, barX+x+1, ys+14), &image.Uniform{shade(float64(x) / float64(barW-1))}, image.Point{}, draw.Src)
	}
	if len(ranked) > 0 {
		lab := mbps(lo)
		drawText(img, barX-textWidth(lab, heatScale)-8, ys, lab, heatScale, heatInk)
		drawText(img, barX+barW+8, ys, mbps(hi)+" MB/S", heatScale, heatInk)
	}
	drawText(img, 10, ys, "SCALE", heatScale, heatInk)
	drawText(img, 10, ys+22, "* STANDOUT.  PUB: RULES/KDB/PAIRS.YAML.  -: NO VERDICT", 1, heatInk)
	return img
}

// mbps prints bytes per second as MB/s, with two decimals below 10.
func mbps(v float64) string {
	if v*1e-6 < 10 {
		return fmt.Sprintf("%.2f", v*1e-6)
	}
	return fmt.Sprintf("%.1f", v*1e-6)
}

// verdictLabel spells a verdict for a cell, '*' marking a standout.
func verdictLabel(v string, standout bool, none string) string {
	if v == "" {
		return none
	}
	if v == VerdictNotDistinguishable {
		return "N/D"
	}
	s := strings.ToUpper(v)
	if standout {
		s += "*"
	}
	return s
}

// writePNG encodes img to path.
func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
