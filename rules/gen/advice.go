package main

import (
	"fmt"
	"strings"
)

// The advice of fspair_kdb_workload_info is derived from the pair verdicts
// in force (the published ones, and the site's where they replaced one),
// never written by hand: a sentence written beside the table can say what
// the table does not (the study's own summary for mail says to avoid xfs
// inside the VM, while its table rates xfs/ext4 best), and one written
// before a site measured a pair goes on advising what the site measured
// worst. So the advice names a file system in a layer only where every
// pair it rates with that file system there has the same verdict, and the
// pairs themselves otherwise: it never recommends a pair rated worst, nor
// advises against one rated best.

// minLayerPairs is the fewest rated pairs that may speak for a file system
// in a layer: a single pair says something of the pair, not of the file
// system.
const minLayerPairs = 2

// adviceItem is one thing the advice recommends or advises against: a file
// system inside the VM (layer guest), on the host (layer host), or one
// pair (layer pair, name GUEST/HOST).
type adviceItem struct{ layer, name string }

// covers reports whether the item speaks for verdict v's pair.
func (it adviceItem) covers(v Verdict) bool {
	switch it.layer {
	case "guest":
		return v.GuestFS == it.name
	case "host":
		return v.HostFS == it.name
	}
	return v.Pair == it.name
}

// workloadAdvice is the advice for one workload: what to prefer and what to
// avoid.
type workloadAdvice struct {
	workload      string
	prefer, avoid []adviceItem
}

// advice derives w's advice from its pair verdicts in force.
func (w *KBWorkload) advice() workloadAdvice {
	a := workloadAdvice{workload: w.Name}
	for _, layer := range []string{"guest", "host"} {
		for _, fs := range w.layerFS(layer) {
			it := adviceItem{layer, fs}
			rated, best, worst := 0, 0, 0
			for _, v := range w.Pairs {
				if !it.covers(v) {
					continue
				}
				rated++
				switch v.Verdict {
				case "best":
					best++
				case "worst":
					worst++
				}
			}
			switch {
			case rated < minLayerPairs:
			case best == rated:
				a.prefer = append(a.prefer, it)
			case worst == rated:
				a.avoid = append(a.avoid, it)
			}
		}
	}
	a.prefer = append(a.prefer, w.uncovered("best", a.prefer)...)
	a.avoid = append(a.avoid, w.uncovered("worst", a.avoid)...)
	return a
}

// layerFS lists the file systems w's pairs have in layer, in file order.
func (w *KBWorkload) layerFS(layer string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range w.Pairs {
		fs := v.GuestFS
		if layer == "host" {
			fs = v.HostFS
		}
		if !seen[fs] {
			seen[fs] = true
			out = append(out, fs)
		}
	}
	return out
}

// uncovered lists, as pair items, the pairs w rates verdict that none of
// items speaks for.
func (w *KBWorkload) uncovered(verdict string, items []adviceItem) []adviceItem {
	var out []adviceItem
	for _, p := range w.pairsRated(verdict, "") {
		v := w.pair(p)
		covered := false
		for _, it := range items {
			covered = covered || it.covers(*v)
		}
		if !covered {
			out = append(out, adviceItem{"pair", p})
		}
	}
	return out
}

// String writes the advice as one or two sentences, e.g. "Prefer ext4 on
// the host or the pair ext4/xfs (guest/host). Avoid btrfs on the host and
// the pair xfs/xfs (guest/host)."
func (a workloadAdvice) String() string {
	var s []string
	if len(a.prefer) > 0 {
		s = append(s, "Prefer "+phrase(a.prefer, "or")+".")
	}
	if len(a.avoid) > 0 {
		s = append(s, "Avoid "+phrase(a.avoid, "and")+".")
	}
	if len(s) == 0 {
		return fmt.Sprintf("The knowledge base rates no pair best or worst for %s.", a.workload)
	}
	return strings.Join(s, " ")
}

// phrase lists items in words: the file systems inside the VM, those on
// the host, then the pairs ("btrfs or ext4 inside the VM, ext4 on the host,
// or the pairs a, b (guest/host)"), joined with conj.
func phrase(items []adviceItem, conj string) string {
	var guest, host, pairs, parts []string
	for _, it := range items {
		switch it.layer {
		case "guest":
			guest = append(guest, it.name)
		case "host":
			host = append(host, it.name)
		default:
			pairs = append(pairs, it.name)
		}
	}
	if len(guest) > 0 {
		parts = append(parts, list(guest, conj)+" inside the VM")
	}
	if len(host) > 0 {
		parts = append(parts, list(host, conj)+" on the host")
	}
	switch len(pairs) {
	case 0:
	case 1:
		parts = append(parts, "the pair "+pairs[0]+" (guest/host)")
	default:
		parts = append(parts, "the pairs "+strings.Join(pairs, ", ")+" (guest/host)")
	}
	return list(parts, conj)
}

// list joins words: "a", "a or b", "a, b, or c".
func list(words []string, conj string) string {
	switch len(words) {
	case 1:
		return words[0]
	case 2:
		return words[0] + " " + conj + " " + words[1]
	}
	return strings.Join(words[:len(words)-1], ", ") + ", " + conj + " " + words[len(words)-1]
}
