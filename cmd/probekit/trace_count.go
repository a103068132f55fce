package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/probekit/probekit/record"
)

// aggregateLoop waits for the end of a --count or --hist trace (a signal,
// the command's or process's exit), printing what the kernel counted at
// the end and every req.interval.
func (t *tracer) aggregateLoop(objs *record.Objects, stop <-chan os.Signal, exited <-chan error) error {
	var tick <-chan time.Time
	if t.req.interval > 0 {
		tk := time.NewTicker(t.req.interval)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		select {
		case <-stop:
			return t.printAggregate(objs)
		case err := <-exited:
			// The programs run in the traced threads: once the command
			// has exited, every hit is counted.
			t.exitErr = err
			return t.printAggregate(objs)
		case <-tick:
			if err := t.printAggregate(objs); err != nil {
				return err
			}
		}
	}
}

// probeTotals are the counts or histograms of one label (the sites of a
// probe or function), in the order the probes were attached.
type probeTotals struct {
	label string
	count uint64
	hist  record.Histogram
}

// totals reads the maps and adds the sites up by label.
func (t *tracer) totals(objs *record.Objects) ([]probeTotals, error) {
	var out []probeTotals
	index := map[string]int{}
	for _, s := range t.sites {
		if _, ok := index[s.label]; !ok && !s.skipped {
			index[s.label] = len(out)
			out = append(out, probeTotals{label: s.label})
		}
	}
	if t.req.mode == record.ModeCount {
		counts, err := objs.Counts(len(t.sites))
		if err != nil {
			return nil, err
		}
		for i, c := range counts {
			if !t.sites[i].skipped {
				out[index[t.sites[i].label]].count += c
			}
		}
		return out, nil
	}
	hists, err := objs.Histograms(len(t.sites))
	if err != nil {
		return nil, err
	}
	for i, h := range hists {
		if t.sites[i].skipped {
			continue
		}
		p := &out[index[t.sites[i].label]]
		for b, c := range h {
			p.hist[b] += c
		}
	}
	return out, nil
}

// printAggregate prints the totals so far (cumulative: -i prints them
// again, grown).
func (t *tracer) printAggregate(objs *record.Objects) error {
	totals, err := t.totals(objs)
	if err != nil {
		return err
	}
	b := t.out.buf[:0]
	switch {
	case t.req.json && t.req.mode == record.ModeCount:
		for _, p := range totals {
			b = append(b, `{"probe":`...)
			b = appendJSON(b, p.label, false)
			b = append(b, `,"count":`...)
			b = strconv.AppendUint(b, p.count, 10)
			b = append(b, "}\n"...)
		}
	case t.req.json:
		for _, p := range totals {
			b = appendHistJSON(b, p.label, &p.hist)
		}
	case t.req.mode == record.ModeCount:
		b = appendCountTable(b, totals)
	default:
		for i, p := range totals {
			if i > 0 {
				b = append(b, '\n')
			}
			b = appendHistText(b, p.label, &p.hist)
		}
	}
	if t.req.interval > 0 && !t.req.json {
		b = append(b, '\n')
	}
	t.out.buf = b
	return t.out.flush()
}

// appendCountTable appends one line per probe: its count, right-aligned,
// then its name.
func appendCountTable(b []byte, totals []probeTotals) []byte {
	width := len("COUNT")
	for _, p := range totals {
		width = max(width, len(strconv.FormatUint(p.count, 10)))
	}
	b = fmt.Appendf(b, "%*s  %s\n", width, "COUNT", "PROBE")
	for _, p := range totals {
		b = fmt.Appendf(b, "%*d  %s\n", width, p.count, p.label)
	}
	return b
}

// appendHistJSON appends {"probe":P,"buckets":[{"low","high","count"}...]}
// with the buckets that have hits, lowest first.
func appendHistJSON(b []byte, label string, h *record.Histogram) []byte {
	b = append(b, `{"probe":`...)
	b = appendJSON(b, label, false)
	b = append(b, `,"buckets":[`...)
	first := true
	for i, c := range h {
		if c == 0 {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		low, high := record.BucketRange(i)
		b = append(b, `{"low":`...)
		b = strconv.AppendInt(b, low, 10)
		b = append(b, `,"high":`...)
		b = strconv.AppendUint(b, high, 10)
		b = append(b, `,"count":`...)
		b = strconv.AppendUint(b, c, 10)
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// histBarWidth is the width of the longest bar, bpftrace's.
const histBarWidth = 52

// appendHistText draws h as bpftrace prints a hist(): the probe's name,
// then a line per bucket from the lowest to the highest with hits,
//
//	[4, 8)                12 |@@@@@@@@@@                                          |
//
// a bar scaled to the fullest bucket.
func appendHistText(b []byte, label string, h *record.Histogram) []byte {
	b = append(append(b, label...), '\n')
	lo, hi := -1, -1
	var most uint64
	for i, c := range h {
		if c == 0 {
			continue
		}
		if lo < 0 {
			lo = i
		}
		hi = i
		most = max(most, c)
	}
	if lo < 0 {
		return append(b, "(no hits)\n"...)
	}
	for i := lo; i <= hi; i++ {
		bar := int(h[i] * histBarWidth / most)
		b = fmt.Appendf(b, "%-16s %8d |%s%s|\n", bucketLabel(i), h[i],
			strings.Repeat("@", bar), strings.Repeat(" ", histBarWidth-bar))
	}
	return b
}

// bucketLabel names bucket i as bpftrace does: (..., 0), [0], [1], [2, 4),
// ... [1K, 2K), with K, M, G, T, P, E for powers of 1024.
func bucketLabel(i int) string {
	switch i {
	case 0:
		return "(..., 0)"
	case 1:
		return "[0]"
	case 2:
		return "[1]"
	}
	low, high := record.BucketRange(i)
	return "[" + powerOf2(uint64(low)) + ", " + powerOf2(high) + ")"
}

// powerOf2 writes v, a power of 2, with the largest suffix of 1024 that
// divides it.
func powerOf2(v uint64) string {
	const suffixes = "KMGTPE"
	s := 0
	for s < len(suffixes) && v >= 1024 && v%1024 == 0 {
		v /= 1024
		s++
	}
	if s == 0 {
		return strconv.FormatUint(v, 10)
	}
	return strconv.FormatUint(v, 10) + suffixes[s-1:s]
}
