// Command series reads an exposition on stdin and prints how many series a
// Prometheus stores from it: -format=text counts the samples;
// -format=proto reads delimited MetricFamily messages (what fspair_exporter
// serves a scraper asking for protobuf) and counts a native histogram as
// one series, a classic one as its buckets, +Inf, _sum and _count, as
// Prometheus 3 with scrape_native_histograms stores them (without
// always_scrape_classic_histograms). Used by scripts/bench.sh, part scrape.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

func main() { os.Exit(run()) }

func run() int {
	format := flag.String("format", "text", "text or proto")
	flag.Parse()
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	var n int
	var err error
	switch *format {
	case "text":
		n, err = countText(in)
	case "proto":
		n, err = countProto(in)
	default:
		err = fmt.Errorf("format %q: want text or proto", *format)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "series:", err)
		return 1
	}
	fmt.Println(n)
	return 0
}

func countText(r *bufio.Reader) (int, error) {
	n := 0
	for {
		line, err := r.ReadString('\n')
		if line != "" && !strings.HasPrefix(line, "#") && strings.TrimSpace(line) != "" {
			n++
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func countProto(r io.Reader) (int, error) {
	dec := expfmt.NewDecoder(r, expfmt.NewFormat(expfmt.TypeProtoDelim))
	n := 0
	for {
		var mf dto.MetricFamily
		err := dec.Decode(&mf)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("decode family after %d series: %w", n, err)
		}
		for _, m := range mf.GetMetric() {
			switch h, s := m.GetHistogram(), m.GetSummary(); {
			case h != nil && h.Schema != nil:
				n++
			case h != nil:
				n += len(h.GetBucket()) + 2
				if k := len(h.GetBucket()); k == 0 || h.GetBucket()[k-1].GetUpperBound() < 1e308 {
					n++ // the +Inf bucket, implicit in protobuf
				}
			case s != nil:
				n += len(s.GetQuantile()) + 2
			default:
				n++
			}
		}
	}
}
