package exporter

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/follow"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/uprobe"
	"github.com/probekit/probekit/usdt"
)

// Names and shapes in export.c.
const (
	usdtProgram = "export_usdt"
	funcProgram = "export_func"
	// LabelStrLen is the most bytes of a string label read, its NUL
	// included (LABEL_STR_LEN).
	LabelStrLen = 64
)

// kind is enum metric_kind.
type kind uint32

const (
	kindCounter kind = iota
	kindHist
	kindLatency
)

// Roles (enum role), the usdt cookie of a location or bit 0 of a function
// probe's BPF cookie; the register set (enum func_regs) is bits 8 up.
const (
	roleStart = 0
	roleEnd   = 1
	regsC     = 0
	regsRet   = 1
)

// Reasons a hit is not counted (enum lost), by index.
var lostReasons = [...]string{"value_unreadable", "map_full", "end_without_start", "depth_overflow"}

// MaxDepth is how many starts of a latency histogram one thread keeps
// open (MAX_DEPTH): recursion deeper than that is counted in
// probekit_export_lost_updates_total{reason="depth_overflow"}, and those
// calls are not measured.
const MaxDepth = 64

// pk_label_args values of the label sources other than an argument
// (LABEL_PID, LABEL_COMM).
const (
	labelArgPID  = 0x10000
	labelArgComm = 0x10001
)

// seriesKey is struct series_key; seriesValue struct series.
type seriesKey struct {
	Nums [MaxLabels]int64
	Str  [LabelStrLen]byte
}

type seriesValue struct {
	Count   uint64
	Sum     int64
	Buckets [MaxBuckets + 1]uint64
}

// program is one metric's loaded collection and its attachments.
type program struct {
	coll  *ebpf.Collection
	links []*attach.Link
	// watch keeps the probes whose target is "*" or a glob attached to
	// the files of every process on the host, as they start and exit;
	// nil when every target is named.
	watch *follow.Watch
	// failed is told each failure of the watch in one process.
	failed func(follow.Event)

	mu sync.Mutex
	// watched is the sites the watch has attached now, by file.
	watched map[string]int

	// readMu serialises reads (concurrent scrapes): they update seen.
	readMu sync.Mutex
	// seen is each series' count at the last read and when it last
	// changed, for the eviction of idle series.
	seen map[seriesKey]seenSeries
	// evicted counts the series evicted.
	evicted uint64
}

type seenSeries struct {
	count   uint64
	changed time.Time
}

// loadMetric loads m's program into the kernel; failed is told each failure
// to attach a "*" or glob target in a process (the others go on).
func loadMetric(m *Metric, failed func(follow.Event)) (*program, error) {
	base, err := exportSpec()
	if err != nil {
		return nil, err
	}
	spec := base.Copy()
	if err := usdt.Prepare(spec); err != nil {
		return nil, err
	}
	k := kindCounter
	switch {
	case m.Latency():
		k = kindLatency
	case m.Type == Histogram:
		k = kindHist
	}
	value := uint32(0)
	if m.Value >= 0 {
		value = uint32(m.Value)
	}
	var bounds [MaxBuckets]int64
	for i, b := range m.Buckets {
		bounds[i] = boundOf(b, m.Latency())
	}
	var args [MaxLabels]uint32
	var strs uint32
	for i, l := range m.Labels {
		switch l.Source {
		case LabelPID:
			args[i] = labelArgPID
		case LabelComm:
			args[i] = labelArgComm
		default:
			args[i] = uint32(l.Arg)
		}
		if l.String || l.Source == LabelComm {
			strs |= 1 << i
		}
	}
	for name, v := range map[string]any{
		"pk_kind": uint32(k), "pk_value_arg": value, "pk_nbounds": uint32(len(m.Buckets)),
		"pk_bounds": bounds, "pk_nlabels": uint32(len(m.Labels)), "pk_label_args": args, "pk_label_strs": strs,
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	spec.Maps["series"].MaxEntries = uint32(m.MaxSeries)
	if !m.Latency() {
		// Only a latency histogram keeps starts. The kernel preallocates
		// an LRU map's entries: at full size these two made the load of a
		// counter take 20 times as long, and its close 4 times.
		spec.Maps["starts"].MaxEntries = 1
		spec.Maps["depths"].MaxEntries = 1
	}
	usesUSDT, usesFunc := false, false
	for _, p := range []*Probe{m.Probe, m.End} {
		if p == nil {
			continue
		}
		if p.Kind == record.KindUSDT {
			usesUSDT = true
		} else {
			usesFunc = true
		}
	}
	// export_func calls bpf_get_attach_cookie, which a kernel before 5.15
	// refuses to load: each program only where it is needed.
	if !usesUSDT {
		delete(spec.Programs, usdtProgram)
	}
	if !usesFunc {
		delete(spec.Programs, funcProgram)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("load the program: %w", err)
	}
	p := &program{coll: coll, failed: failed, watched: map[string]int{}, seen: map[seriesKey]seenSeries{}}
	if err := p.attach(spec, m); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// exportSpec is export.c's collection, parsed once: each metric loads a
// copy.
var exportSpec = sync.OnceValues(loadExport)

// boundOf is a bucket bound as export.c compares it with an integer
// value: v <= b holds for an integer v exactly when v <= floor(b); a
// latency bound in seconds is compared in nanoseconds.
func boundOf(b float64, latency bool) int64 {
	if latency {
		b *= 1e9
	}
	b = math.Floor(b)
	switch {
	case b >= math.MaxInt64:
		return math.MaxInt64
	case b <= math.MinInt64:
		return math.MinInt64
	}
	return int64(b)
}

func (p *program) attach(spec *ebpf.CollectionSpec, m *Metric) error {
	var att *usdt.Attacher
	if prog := p.coll.Programs[usdtProgram]; prog != nil {
		var err error
		if att, err = usdt.NewAttacher(spec, p.coll); err != nil {
			return err
		}
	}
	var watched []follow.Probe
	for role, pr := range []*Probe{m.Probe, m.End} {
		if pr == nil {
			continue
		}
		if follow.Selector(pr.Target) {
			fp := follow.Probe{
				Target: pr.Target, Provider: pr.Provider, Name: pr.Name,
				Program: p.coll.Programs[usdtProgram], Cookie: uint64(role),
			}
			if pr.Kind != record.KindUSDT {
				// Every matching file that has the function, as each
				// process maps it. The C calling convention is read
				// there whatever the file: a Go program's registers
				// are not checked for as in attachFunc.
				fp = follow.Probe{
					Target: pr.Target, Function: pr.Func, Return: pr.Kind == record.KindUretprobe,
					Program: p.coll.Programs[funcProgram], Cookie: funcCookie(pr, role),
				}
			}
			watched = append(watched, fp)
			continue
		}
		if pr.Kind == record.KindUSDT {
			l, err := att.Attach(p.coll.Programs[usdtProgram], pr.Target, pr.Provider, pr.Name, &usdt.Options{Cookie: uint64(role)})
			if err != nil {
				return err
			}
			p.links = append(p.links, l)
			continue
		}
		l, err := attachFunc(p.coll.Programs[funcProgram], pr, role, role == roleStart && readsArgs(m))
		if err != nil {
			return err
		}
		p.links = append(p.links, l)
	}
	if len(watched) > 0 {
		w, err := follow.WatchHost(watched, &follow.Options{Attacher: att, Notify: p.notify})
		if err != nil {
			return err
		}
		p.watch = w
	}
	return nil
}

// notify keeps watched in line with the watch's attachments and passes
// the failures on. The watch calls it with its own lock held: it takes
// only p.mu, and failed only locks that no caller holds while calling
// into the watch.
func (p *program) notify(e follow.Event) {
	switch e.Kind {
	case follow.Attached:
		p.mu.Lock()
		p.watched[e.File] += e.Sites
		p.mu.Unlock()
	case follow.Detached:
		p.mu.Lock()
		if p.watched[e.File] -= e.Sites; p.watched[e.File] <= 0 {
			delete(p.watched, e.File)
		}
		p.mu.Unlock()
	case follow.Failed:
		if p.failed != nil {
			p.failed(e)
		}
	}
}

// readsArgs reports whether m reads arguments of its start probe.
func readsArgs(m *Metric) bool {
	if m.Value >= 0 {
		return true
	}
	for _, l := range m.Labels {
		if l.Source == LabelArg {
			return true
		}
	}
	return false
}

// attachFunc attaches prog to the function of pr; readsArgs says the
// metric reads its argument registers.
func attachFunc(prog *ebpf.Program, pr *Probe, role int, readsArgs bool) (*attach.Link, error) {
	b, err := uprobe.Open(pr.Target)
	if err != nil {
		return nil, err
	}
	// Attached, the kernel holds what it needs of the file.
	defer b.Close()
	if pr.Kind == record.KindUprobe && readsArgs && b.IsGo() {
		return nil, fmt.Errorf("%s is a Go program: export reads the C calling convention's argument registers, not Go's", pr.Target)
	}
	fn, err := b.Function(pr.Func)
	if err != nil {
		return nil, err
	}
	opts := &uprobe.Options{Cookie: funcCookie(pr, role)}
	if pr.Kind == record.KindUretprobe {
		// A uretprobe on native code; on Go, a probe on each return
		// instruction.
		return b.Return(fn.String(), prog, opts)
	}
	return b.Entry(fn.String(), prog, opts)
}

// funcCookie is the BPF cookie of a function probe: its role in bit 0,
// the register set from bit 8.
func funcCookie(pr *Probe, role int) uint64 {
	if pr.Kind == record.KindUretprobe {
		return uint64(role) | regsRet<<8
	}
	return uint64(role) | regsC<<8
}

// close detaches every probe, then releases the program and maps.
func (p *program) close() error {
	var errs []error
	if p.watch != nil {
		errs = append(errs, p.watch.Close())
		p.watch = nil
	}
	for _, l := range p.links {
		errs = append(errs, l.Close())
	}
	p.links = nil
	p.coll.Close()
	return errors.Join(errs...)
}

// sites returns the number of sites attached per file.
func (p *program) sites() map[string]int {
	out := map[string]int{}
	for _, l := range p.links {
		for _, s := range l.Sites() {
			out[s.Path]++
		}
	}
	p.mu.Lock()
	for f, n := range p.watched {
		out[f] += n
	}
	p.mu.Unlock()
	return out
}

// series is one series read: its label values and its totals over the
// CPUs.
type series struct {
	labels []string
	value  seriesValue
}

// maxSeriesRead bounds the entries one read takes from the series map,
// above any max_series (the map cannot hold more; the bound keeps a
// changing map from being walked forever).
const maxSeriesRead = 2 * MaxMaxSeries

// read returns m's series, those with the same label values merged, the
// overflow series (the hits past max_series; nil when there were none)
// and the hits lost by reason.
//
// A series of a labelled metric whose count has not changed for
// m.SeriesIdle is evicted: deleted from the map, not returned, counted
// in p.evicted. now is the time of the read.
func (p *program) read(m *Metric, now time.Time) (map[string]*series, *series, [len(lostReasons)]uint64, error) {
	p.readMu.Lock()
	defer p.readMu.Unlock()
	var lost [len(lostReasons)]uint64
	out := map[string]*series{}
	var k seriesKey
	var per []seriesValue
	var idle []seriesKey
	evicts := len(m.Labels) > 0 && m.SeriesIdle > 0
	present := make(map[seriesKey]bool, len(p.seen))
	it := p.coll.Maps["series"].Iterate()
	for n := 0; it.Next(&k, &per); n++ {
		if n >= maxSeriesRead {
			break
		}
		if evicts {
			var count uint64
			for i := range per {
				count += per[i].Count
			}
			s, ok := p.seen[k]
			if !ok || s.count != count {
				s = seenSeries{count: count, changed: now}
				p.seen[k] = s
			}
			present[k] = true
			if now.Sub(s.changed) >= m.SeriesIdle {
				idle = append(idle, k)
				continue
			}
		}
		addSeries(out, labelValues(m, &k), per)
	}
	if err := it.Err(); err != nil {
		return nil, nil, lost, fmt.Errorf("read the series: %w", err)
	}
	// Deleted after the walk: a delete during it may restart it. A hit
	// on another CPU between the read and the delete is lost with the
	// series; the series was idle for m.SeriesIdle before it.
	for _, k := range idle {
		if err := p.coll.Maps["series"].Delete(&k); err == nil {
			p.evicted++
		}
		delete(p.seen, k)
	}
	for k := range p.seen {
		if !present[k] {
			delete(p.seen, k)
		}
	}
	if err := p.coll.Maps["other"].Lookup(uint32(0), &per); err != nil {
		return nil, nil, lost, fmt.Errorf("read the series other: %w", err)
	}
	overflow := map[string]*series{}
	addSeries(overflow, otherValues(m), per)
	var n []uint64
	for i := range lost {
		if err := p.coll.Maps["errors"].Lookup(uint32(i), &n); err != nil {
			return nil, nil, lost, fmt.Errorf("read the errors: %w", err)
		}
		for _, c := range n {
			lost[i] += c
		}
	}
	var over *series
	for _, s := range overflow {
		over = s
	}
	return out, over, lost, nil
}

// addSeries adds the per-CPU values per to the series of labels and
// returns their count.
func addSeries(out map[string]*series, labels []string, per []seriesValue) uint64 {
	var total seriesValue
	for i := range per {
		v := &per[i]
		total.Count += v.Count
		total.Sum += v.Sum
		for b, c := range v.Buckets {
			total.Buckets[b] += c
		}
	}
	if total.Count == 0 && len(labels) > 0 {
		return 0
	}
	id := strings.Join(labels, "\xff")
	s := out[id]
	if s == nil {
		s = &series{labels: labels}
		out[id] = s
	}
	s.value.Count += total.Count
	s.value.Sum += total.Sum
	for b, c := range total.Buckets {
		s.value.Buckets[b] += c
	}
	return total.Count
}

// labelValues are the values of m's labels in k.
func labelValues(m *Metric, k *seriesKey) []string {
	vals := make([]string, len(m.Labels))
	for i, l := range m.Labels {
		if l.String || l.Source == LabelComm {
			s := k.Str[:]
			if n := bytes.IndexByte(s, 0); n >= 0 {
				s = s[:n]
			}
			vals[i] = strings.ToValidUTF8(string(s), "\uFFFD")
		} else {
			vals[i] = strconv.FormatInt(k.Nums[i], 10)
		}
	}
	return vals
}

// otherLabel is the value of every label of the series that holds the
// hits past a metric's max_series; that series also has OverflowLabel.
const otherLabel = "other"

// OverflowLabel is the label, "true", of the one series of a metric that
// holds the hits past its max_series: an argument read as a label value
// may be "other" too, and its series stays apart.
const OverflowLabel = "overflow"

func otherValues(m *Metric) []string {
	vals := make([]string, len(m.Labels))
	for i := range vals {
		vals[i] = otherLabel
	}
	return vals
}

// evictions returns the number of series evicted.
func (p *program) evictions() uint64 {
	p.readMu.Lock()
	defer p.readMu.Unlock()
	return p.evicted
}
