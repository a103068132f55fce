package tracer

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/probekit/probekit/internal/jsontext"
	"github.com/probekit/probekit/record"
)

// aggregateLoop waits for the end of a --count or --hist trace (a signal,
// the command's or process's exit), printing what the kernel counted at
// the end and every cfg.Interval.
func (t *tracer) aggregateLoop(objs *record.Objects, stop <-chan struct{}, exited <-chan error) error {
	var tick <-chan time.Time
	if t.cfg.Interval > 0 {
		tk := time.NewTicker(t.cfg.Interval)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		select {
		case <-stop:
			return t.printAggregate(objs)
		case <-t.drain:
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
	if t.sitesMu != nil {
		// Selector targets add sites as objects are attached.
		t.sitesMu.RLock()
		defer t.sitesMu.RUnlock()
	}
	var out []probeTotals
	index := map[string]int{}
	for _, s := range t.sites {
		if _, ok := index[s.Label]; !ok && !s.skipped {
			index[s.Label] = len(out)
			out = append(out, probeTotals{label: s.Label})
		}
	}
	if t.cfg.Mode == record.ModeCount {
		counts, err := objs.Counts(len(t.sites))
		if err != nil {
			return nil, err
		}
		for i, c := range counts {
			if !t.sites[i].skipped {
				out[index[t.sites[i].Label]].count += c
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
		p := &out[index[t.sites[i].Label]]
		for b, c := range h {
			p.hist[b] += c
		}
	}
	return out, nil
}

// printAggregate prints the totals so far (cumulative: -i prints them
// again, grown).
func (t *tracer) printAggregate(objs *record.Objects) error {
	if t.cfg.Mode == record.ModeLatency && len(t.cfg.Keys) == 0 {
		return t.printLatency(objs)
	}
	b := t.out.buf[:0]
	if t.cfg.HasStackKey() {
		return t.printStackCounts(objs)
	}
	if len(t.cfg.Keys) > 0 {
		totals, err := t.keyedTotals(objs)
		if err != nil {
			return err
		}
		if t.cfg.JSON {
			b = t.appendKeyedJSON(b, totals)
		} else {
			b = t.appendKeyedText(b, totals)
		}
		return t.flushAggregate(b)
	}
	totals, err := t.totals(objs)
	if err != nil {
		return err
	}
	switch {
	case t.cfg.JSON && t.cfg.Mode == record.ModeCount:
		for _, p := range totals {
			b = append(b, `{"probe":`...)
			b = jsontext.Append(b, p.label, false)
			b = append(b, `,"count":`...)
			b = strconv.AppendUint(b, p.count, 10)
			b = append(b, "}\n"...)
		}
	case t.cfg.JSON:
		for _, p := range totals {
			b = appendHistJSON(b, p.label, &p.hist)
		}
	case t.cfg.Mode == record.ModeCount:
		b = appendCountTable(b, totals)
	default:
		for i, p := range totals {
			if i > 0 {
				b = append(b, '\n')
			}
			b = appendHistText(b, Escape(p.label), &p.hist)
		}
	}
	return t.flushAggregate(b)
}

// flushAggregate writes b, one printing of the totals.
func (t *tracer) flushAggregate(b []byte) error {
	if t.cfg.Interval > 0 && !t.cfg.JSON {
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
		b = fmt.Appendf(b, "%*d  %s\n", width, p.count, Escape(p.label))
	}
	return b
}

// appendHistJSON appends {"probe":P,"buckets":[{"low","high","count"}...]}
// with the buckets that have hits, lowest first.
func appendHistJSON(b []byte, label string, h *record.Histogram) []byte {
	b = append(b, `{"probe":`...)
	b = jsontext.Append(b, label, false)
	return appendBucketsJSON(b, h)
}

// appendBucketsJSON appends ,"buckets":[{"low","high","count"}...]} with
// the buckets that have hits, lowest first.
func appendBucketsJSON(b []byte, h *record.Histogram) []byte {
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

// Key is one part of a key: what the kernel keys by, and its name in the
// output (arg1, str2, ret, pid, tid, comm, probe, func, stack).
type Key struct {
	record.KeyPart
	Name string
}

// ParseKeys reads KEY[,KEY...] (probekit trace's --by): arg N, str N (N
// from 1), ret, pid, tid, comm, probe, func, stack. "arg N" may be written
// argN too.
func ParseKeys(s string) ([]Key, error) {
	var parts []Key
	strs := 0
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		word, num := f, ""
		if i := strings.IndexAny(f, " 0123456789"); i >= 0 {
			word, num = f[:i], strings.TrimSpace(f[i:])
		}
		var p Key
		switch word {
		case "arg", "str":
			n, err := strconv.Atoi(num)
			if err != nil || n < 1 || n > record.MaxArgs {
				return nil, fmt.Errorf("key %q: want %s N, N from 1 to %d", f, word, record.MaxArgs)
			}
			p.KeyPart = record.KeyPart{Kind: record.KeyArg, Val: n - 1}
			if word == "str" {
				p.Kind = record.KeyStr
				strs++
			}
			p.Name = word + num
		case "stack":
			if num != "" {
				return nil, fmt.Errorf("key %q: stack takes no number", f)
			}
			p.Name, p.Kind = word, record.KeyStack
		case "ret", "pid", "tid", "comm", "probe", "func":
			if num != "" {
				return nil, fmt.Errorf("key %q: %s takes no number", f, word)
			}
			p.Name = word
			p.Kind = map[string]record.KeyKind{"ret": record.KeyArg, "pid": record.KeyPID, "tid": record.KeyTID,
				"comm": record.KeyComm, "probe": record.KeyProbe, "func": record.KeyProbe}[word]
		default:
			return nil, fmt.Errorf("key %q: want arg N, str N, ret, pid, tid, comm, probe, func or stack", f)
		}
		parts = append(parts, p)
	}
	switch {
	case len(parts) > record.MaxKeys:
		return nil, fmt.Errorf("%d keys, at most %d", len(parts), record.MaxKeys)
	case strs > 1:
		return nil, errors.New("at most one str key")
	}
	return parts, nil
}

// keyedTotal is one key's count or histogram, its parts formatted.
type keyedTotal struct {
	// text, label and json are the key's parts as printed: in a table's
	// columns (escaped, Escape), in a histogram's NAME=VALUE label
	// (strings quoted and escaped), and as JSON values.
	text, label, json []string
	count             uint64
	hist              record.Histogram
}

// keyedTotals reads the keyed map and adds up the entries whose printed
// keys are the same (the sites of one probe or function), sorted by count,
// the most first, at most --top of them.
func (t *tracer) keyedTotals(objs *record.Objects) ([]keyedTotal, error) {
	entries, err := objs.Keyed()
	if err != nil {
		return nil, err
	}
	if t.sitesMu != nil {
		t.sitesMu.RLock()
		defer t.sitesMu.RUnlock()
	}
	byKey := map[string]int{}
	var out []keyedTotal
	for _, e := range entries {
		var kt keyedTotal
		for i, p := range t.cfg.Keys {
			var text, js string
			quote := false // text is the traced program's: escape it
			switch p.Kind {
			case record.KeyArg, record.KeyPID, record.KeyTID:
				text = strconv.FormatInt(e.Key.Nums[i], 10)
				js = text
			case record.KeyStr:
				text, js, quote = e.Key.Str, string(jsontext.Append(nil, e.Key.Str, false)), true
			case record.KeyComm:
				text, js, quote = e.Key.Comm, string(jsontext.Append(nil, e.Key.Comm, false)), true
			case record.KeyProbe:
				if int(e.Key.Probe) >= len(t.sites) {
					return nil, fmt.Errorf("keyed entry of unknown probe %d", e.Key.Probe)
				}
				text = t.sites[e.Key.Probe].Label
				if p.Name == "func" {
					text = t.sites[e.Key.Probe].Function
				}
				js, quote = string(jsontext.Append(nil, text, false)), true
			case record.KeyStack:
				text, js = t.stackKey(objs, e.Key)
			}
			label := js
			if quote {
				text, label = Escape(text), string(appendQuoted(nil, text))
			}
			kt.text, kt.label, kt.json = append(kt.text, text), append(kt.label, label), append(kt.json, js)
		}
		id := strings.Join(kt.json, "\x00")
		i, ok := byKey[id]
		if !ok {
			i = len(out)
			byKey[id] = i
			out = append(out, kt)
		}
		out[i].count += e.Count
		out[i].hist[e.Bucket] += e.Count
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].count != out[b].count {
			return out[a].count > out[b].count
		}
		return strings.Join(out[a].text, "\x00") < strings.Join(out[b].text, "\x00")
	})
	if t.cfg.Top > 0 && len(out) > t.cfg.Top {
		out = out[:t.cfg.Top]
	}
	return out, nil
}

// appendKeyedJSON appends {"key":{NAME:VALUE...},"count":N} or
// {"key":{...},"buckets":[...]} per key.
func (t *tracer) appendKeyedJSON(b []byte, totals []keyedTotal) []byte {
	for _, kt := range totals {
		b = append(b, `{"key":{`...)
		for i, p := range t.cfg.Keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsontext.Append(b, p.Name, false)
			b = append(append(b, ':'), kt.json[i]...)
		}
		b = append(b, '}')
		if t.cfg.Mode == record.ModeCount {
			b = append(b, `,"count":`...)
			b = strconv.AppendUint(b, kt.count, 10)
			b = append(b, "}\n"...)
			continue
		}
		b = appendBucketsJSON(b, &kt.hist)
	}
	return b
}

// appendKeyedText appends a table, COUNT then the key's columns, or a
// histogram per key named by NAME=VALUE pairs.
func (t *tracer) appendKeyedText(b []byte, totals []keyedTotal) []byte {
	if t.cfg.Mode != record.ModeCount {
		for i, kt := range totals {
			if i > 0 {
				b = append(b, '\n')
			}
			var label []string
			for j, p := range t.cfg.Keys {
				label = append(label, p.Name+"="+kt.label[j])
			}
			b = appendHistText(b, strings.Join(label, " "), &kt.hist)
		}
		return b
	}
	widths := []int{len("COUNT")}
	for _, p := range t.cfg.Keys {
		widths = append(widths, len(p.Name))
	}
	for _, kt := range totals {
		widths[0] = max(widths[0], len(strconv.FormatUint(kt.count, 10)))
		for j, s := range kt.text {
			widths[j+1] = max(widths[j+1], len(s))
		}
	}
	row := func(count string, cols []string) {
		b = fmt.Appendf(b, "%*s", widths[0], count)
		for j, s := range cols {
			if j == len(cols)-1 {
				b = fmt.Appendf(b, "  %s", s)
			} else {
				b = fmt.Appendf(b, "  %-*s", widths[j+1], s)
			}
		}
		b = append(b, '\n')
	}
	var names []string
	for _, p := range t.cfg.Keys {
		names = append(names, strings.ToUpper(p.Name))
	}
	row("COUNT", names)
	for _, kt := range totals {
		row(strconv.FormatUint(kt.count, 10), kt.text)
	}
	return b
}
