// Package wordpack keeps runs of 64-bit words that are mostly zero as a
// bitmap of the non-zero words and those words in order. The exporter
// holds every disk's counters for a scrape (exporter/collector) and every
// disk's guest histograms between polls (exporter/guest) so: a disk's
// requests fall in a few buckets of each histogram.
package wordpack

import "math/bits"

// Pack sets mask (at least len(w)/64 rounded up words) to w's non-zero
// words and returns them, in order, in words from alloc (not called when
// there are none).
func Pack(mask, w []uint64, alloc func(n int) []uint64) []uint64 {
	clear(mask)
	n := 0
	for i, v := range w {
		if v != 0 {
			mask[i>>6] |= 1 << (i & 63)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	vals := alloc(n)[:0]
	for _, v := range w {
		if v != 0 {
			vals = append(vals, v)
		}
	}
	return vals
}

// rank is how many words before w are non-zero: where w's value is in the
// packed words, if w is non-zero.
func rank(mask []uint64, w int) int {
	n := 0
	for _, m := range mask[:w>>6] {
		n += bits.OnesCount64(m)
	}
	return n + bits.OnesCount64(mask[w>>6]&(1<<(w&63)-1))
}

// At is the word at w.
func At(mask, vals []uint64, w int) uint64 {
	if mask[w>>6]&(1<<(w&63)) == 0 {
		return 0
	}
	return vals[rank(mask, w)]
}

// Any says whether a word of the n from off is non-zero: the mask's bits
// for them, a mask word at a time.
func Any(mask []uint64, off, n int) bool {
	for i := 0; i < n; {
		w := off + i
		take := min(64-w&63, n-i)
		if mask[w>>6]>>(w&63)&(uint64(1)<<take-1) != 0 {
			return true
		}
		i += take
	}
	return false
}

// Unpack is the n words from off, unpacked into buf (at least n long).
func Unpack(mask, vals []uint64, off, n int, buf []uint64) []uint64 {
	buf = buf[:n]
	k := rank(mask, off)
	// Up to one mask word at a time: a run of non-zero words is copied, a
	// run of zeros cleared, a mix walked bit by bit.
	for i := 0; i < n; {
		w := off + i
		take := min(64-w&63, n-i)
		all := uint64(1)<<take - 1 // every bit when take is 64
		m := mask[w>>6] >> (w & 63) & all
		out := buf[i : i+take]
		if m == all {
			k += copy(out, vals[k:k+take])
		} else {
			clear(out)
			for ; m != 0; m &= m - 1 {
				out[bits.TrailingZeros64(m)] = vals[k]
				k++
			}
		}
		i += take
	}
	return buf
}
