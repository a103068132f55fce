package exporter

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/follow"
	"github.com/probekit/probekit/internal/features"
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
	// MaxSiteMetrics is how many metrics one attachment of a probe
	// updates (MAX_SITE_METRICS): the metrics past it on the same probe
	// take another attachment.
	MaxSiteMetrics = 256
)

// kind is enum metric_kind; kindDead marks a metric closed while others
// of its group still run (its entries in sites stay, and do nothing).
type kind uint32

const (
	kindCounter kind = iota
	kindHist
	kindLatency
	kindDead
)

// Roles (enum role) of a metric at a site; siteEnd marks ROLE_END in a
// sites entry (SITE_END).
const (
	roleStart = 0
	roleEnd   = 1
	siteEnd   = 1 << 31
)

// Where a hit's arguments are (enum args_from), bit 32 up of a function
// probe's BPF cookie.
const (
	argsUSDT = 0
	argsC    = 1
	argsRet  = 2
)

// Reasons a hit is not counted (enum lost), by index.
var lostReasons = [...]string{"value_unreadable", "map_full", "end_without_start", "depth_overflow", "start_abandoned"}

// MaxDepth is how many starts of a latency histogram one thread keeps
// open (MAX_DEPTH): recursion deeper than that is counted in
// probekit_export_lost_updates_total{reason="depth_overflow"}, and those
// calls are not measured.
const MaxDepth = 64

// label_args values of the label sources other than an argument
// (LABEL_PID, LABEL_COMM).
const (
	labelArgPID  = 0x10000
	labelArgComm = 0x10001
)

// metricShape is struct metric.
type metricShape struct {
	Kind      uint32
	ValueArg  uint32
	NBounds   uint32
	NLabels   uint32
	LabelArgs [MaxLabels]uint32
	LabelStrs uint32
	MaxSeries uint32
	Match     uint32
	_         uint32
	Bounds    [MaxBuckets]int64
}

// siteTable is struct site.
type siteTable struct {
	N       uint32
	_       uint32
	Metrics [MaxSiteMetrics]uint32
}

// seriesKey is struct series_key; seriesValue struct series.
type seriesKey struct {
	Metric uint32
	_      uint32
	Nums   [MaxLabels]int64
	Str    [LabelStrLen]byte
}

type seriesValue struct {
	Count   uint64
	Sum     int64
	Buckets [MaxBuckets + 1]uint64
}

// group is the metrics loaded together (by one Apply): one collection,
// whose maps hold every metric's series by metric index, and one
// attachment per probe the metrics use, shared by the metrics on it
// (up to MaxSiteMetrics). It is released when its last metric closes.
type group struct {
	coll *ebpf.Collection
	// watch keeps the sites whose target is "*" or a glob attached to
	// the files of every process on the host, as they start and exit;
	// nil when every target is named.
	watch *follow.Watch

	mu    sync.Mutex
	sites []*site
	// open counts the metrics not closed.
	open int

	// readMu serialises reads of the series (concurrent scrapes): a read
	// evicts, and takes a snapshot of the labelled series once per
	// scrape (snapGen).
	readMu  sync.Mutex
	snapGen uint64
	snap    map[uint32][]keyedSeries
}

type keyedSeries struct {
	key seriesKey
	per []seriesValue
}

// site is one attachment of a probe: its index is its cookie, and its
// entry in the sites map lists its metrics.
type site struct {
	id    uint32
	probe *Probe
	// from is where its arguments are (argsUSDT, argsC, argsRet).
	from uint64
	// checkC refuses a Go function: a metric on it reads C's argument
	// registers.
	checkC  bool
	entries []uint32
	users   []*program
	link    *attach.Link
	// watched is the sites the watch has attached now, by file (under
	// the group's mu).
	watched map[string]int
	err     error
}

// program is one metric in its group.
type program struct {
	g  *group
	id uint32
	m  *Metric
	// at is the sites p updates.
	at []*site
	// failed is told each failure of the watch in one process.
	failed func(follow.Event)
	closed bool

	// seen is each series' count at the last read and when it last
	// changed, for the eviction of idle series (under g.readMu).
	seen map[seriesKey]seenSeries
	// evicted counts the series evicted (under g.readMu).
	evicted uint64
	// invalid is the hits of the series read last whose string label
	// was not UTF-8 (under g.readMu).
	invalid uint64
}

type seenSeries struct {
	count   uint64
	changed time.Time
}

// shapeOf is m's entry in the metrics map.
func shapeOf(m *Metric) metricShape {
	sh := metricShape{Kind: uint32(kindCounter), NBounds: uint32(len(m.Buckets)), NLabels: uint32(len(m.Labels)), MaxSeries: uint32(m.MaxSeries)}
	switch {
	case m.Latency():
		sh.Kind = uint32(kindLatency)
	case m.Type == Histogram:
		sh.Kind = uint32(kindHist)
	}
	if m.Value.Num() > 0 {
		sh.ValueArg = uint32(m.Value.Index())
	}
	for i, b := range m.Buckets {
		sh.Bounds[i] = boundOf(b, m.Latency())
	}
	for i, l := range m.Labels {
		switch l.Source {
		case LabelPID:
			sh.LabelArgs[i] = labelArgPID
		case LabelComm:
			sh.LabelArgs[i] = labelArgComm
		default:
			sh.LabelArgs[i] = uint32(l.Arg.Index())
		}
		if l.String || l.Source == LabelComm {
			sh.LabelStrs |= 1 << i
		}
	}
	if len(m.Labels) == 0 {
		sh.MaxSeries = 1
	}
	for i, a := range latencyMatch(m) {
		sh.Match |= uint32(a+1) << (4 * i)
	}
	return sh
}

// latencyMatch is the identity arguments (0-based) of a latency
// histogram's start and end: an end closes only the latest start with
// the same values (export.c's match). They are known for USDT pairs
// (record.LatencyMatch: Python's function__entry and function__return,
// by file and function); a function's returns need none, they come in
// its calls' order.
func latencyMatch(m *Metric) []int {
	if !m.Latency() || m.Probe.Kind != record.KindUSDT || m.End.Kind != record.KindUSDT {
		return nil
	}
	return record.LatencyMatch(m.Probe.Provider+":"+m.Probe.Name, m.End.Provider+":"+m.End.Name)
}

// siteKey is what makes two probes one site.
func siteKey(pr *Probe, checkC bool) string {
	return fmt.Sprintf("%d\x00%s\x00%s\x00%s\x00%s\x00%t", pr.Kind, pr.Target, pr.Provider, pr.Name, pr.Func, checkC)
}

// Sizes of the USDT maps of a group: a spec slot per location of a site
// (each site's cookie makes its own specs), at least the header's 256;
// a slot costs 304 bytes (the libbpf 1.7 layout), so 1,000 USDT sites
// take 9.7 MB.
const (
	minSpecs     = 256
	specsPerSite = 32
	maxSpecs     = 1 << 16
)

// loadGroup loads the programs of ms as one group and attaches their
// probes; failed(m) is told each failure to attach a "*" or glob target
// of m in a process (the others go on). It returns each metric's
// program, or the error that keeps it from working (the other metrics
// work).
func loadGroup(ms []*Metric, failed func(*Metric) func(follow.Event)) ([]*program, []error) {
	// export_func reads its site's BPF cookie: without cookies it does
	// not load, so metrics with a function probe are refused by name and
	// the others load without it.
	if err := features.Check(features.Cookie); err != nil && slices.ContainsFunc(ms, funcMetric) {
		progs := make([]*program, len(ms))
		errs := make([]error, len(ms))
		var rest []*Metric
		var at []int
		for i, m := range ms {
			if funcMetric(m) {
				errs[i] = fmt.Errorf("function probes: %w", err)
				continue
			}
			rest = append(rest, m)
			at = append(at, i)
		}
		ps, es := loadGroupOf(rest, failed)
		for j, i := range at {
			progs[i], errs[i] = ps[j], es[j]
		}
		return progs, errs
	}
	return loadGroupOf(ms, failed)
}

// funcMetric tells a metric one of whose probes is a function's.
func funcMetric(m *Metric) bool {
	for _, pr := range []*Probe{m.Probe, m.End} {
		if pr != nil && pr.Kind != record.KindUSDT {
			return true
		}
	}
	return false
}

// loadGroupOf is loadGroup once the metrics can load.
func loadGroupOf(ms []*Metric, failed func(*Metric) func(follow.Event)) ([]*program, []error) {
	progs := make([]*program, len(ms))
	errs := make([]error, len(ms))
	fail := func(err error) ([]*program, []error) {
		for i := range errs {
			errs[i] = err
		}
		return make([]*program, len(ms)), errs
	}
	if len(ms) == 0 {
		return progs, errs
	}
	base, err := exportSpec()
	if err != nil {
		return fail(err)
	}
	spec := base.Copy()
	if err := usdt.Prepare(spec); err != nil {
		return fail(err)
	}
	g := &group{open: len(ms)}
	bySite := map[string]*site{}
	var series uint64
	usesUSDT, usesFunc, latency := 0, false, false
	// Without BPF cookies a USDT location's spec, and so its site, is
	// found by its address in the process (the IP map): a second site
	// on the probe in one group would share the first's spec, and its
	// metrics would never count. So a USDT probe has one site, of at
	// most MaxSiteMetrics metrics; the metrics past it are refused.
	cookie, err := features.Have(features.Cookie)
	if err != nil {
		cookie = true // the attach says what is missing
	}
	full := func(m *Metric) bool {
		for _, pr := range []*Probe{m.Probe, m.End} {
			if pr == nil || pr.Kind != record.KindUSDT {
				continue
			}
			if s := bySite[siteKey(pr, false)]; s != nil && len(s.entries) >= MaxSiteMetrics {
				return true
			}
		}
		return false
	}
	for i, m := range ms {
		if !cookie && full(m) {
			errs[i] = fmt.Errorf("more than %d metrics on one USDT probe: %w", MaxSiteMetrics, features.Check(features.Cookie))
			g.open--
			continue
		}
		p := &program{g: g, id: uint32(i), m: m, seen: map[seriesKey]seenSeries{}}
		if failed != nil {
			p.failed = failed(m)
		}
		progs[i] = p
		if len(m.Labels) > 0 {
			series += uint64(m.MaxSeries)
		} else {
			series++
		}
		latency = latency || m.Latency()
		for role, pr := range []*Probe{m.Probe, m.End} {
			if pr == nil {
				continue
			}
			checkC := pr.Kind == record.KindUprobe && role == roleStart && readsArgs(m)
			k := siteKey(pr, checkC)
			s := bySite[k]
			if s == nil || len(s.entries) == MaxSiteMetrics {
				s = &site{id: uint32(len(g.sites)), probe: pr, checkC: checkC, watched: map[string]int{}}
				switch pr.Kind {
				case record.KindUSDT:
					s.from = argsUSDT
					usesUSDT++
				case record.KindUretprobe:
					s.from, usesFunc = argsRet, true
				default:
					s.from, usesFunc = argsC, true
				}
				bySite[k] = s
				g.sites = append(g.sites, s)
			}
			e := uint32(i)
			if role == roleEnd {
				e |= siteEnd
			}
			s.entries = append(s.entries, e)
			s.users = append(s.users, p)
			p.at = append(p.at, s)
		}
	}
	if g.open == 0 {
		return progs, errs
	}
	// Each CPU may add one series past a metric's max_series (export.c's
	// add): room for that, beyond the sum.
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return fail(err)
	}
	n := uint32(len(ms))
	for name, size := range map[string]uint32{
		"metrics": n, "inserted": n, "evicted": n, "other": n, "errors": n * uint32(len(lostReasons)),
		"sites": uint32(len(g.sites)), "series": uint32(min(series+uint64(cpus), math.MaxUint32)),
	} {
		spec.Maps[name].MaxEntries = size
	}
	if !latency {
		// Only a latency histogram keeps starts. The kernel preallocates
		// an LRU map's entries: at full size these two made the load of a
		// counter take 20 times as long, and its close 4 times.
		spec.Maps["starts"].MaxEntries = 1
		spec.Maps["depths"].MaxEntries = 1
	}
	specs := min(max(minSpecs, specsPerSite*usesUSDT), maxSpecs)
	if err := usdt.SetCapacity(spec, uint32(specs), uint32(4*specs)); err != nil {
		return fail(err)
	}
	// export_func calls bpf_get_attach_cookie, which a kernel before 5.15
	// refuses to load: each program only where it is needed.
	if usesUSDT == 0 {
		delete(spec.Programs, usdtProgram)
	}
	if !usesFunc {
		delete(spec.Programs, funcProgram)
	}
	coll, err := newCollection(spec)
	if err != nil {
		return fail(fmt.Errorf("load the program: %w", err))
	}
	g.coll = coll
	if err := g.fill(ms); err != nil {
		g.coll.Close()
		return fail(err)
	}
	g.attach(spec)
	// A metric one of whose sites failed does not work: it is closed,
	// and the sites only it used are detached.
	for i, p := range progs {
		if p == nil {
			continue
		}
		for _, s := range p.at {
			if s.err != nil {
				errs[i] = s.err
				break
			}
		}
		if errs[i] != nil {
			p.close()
			progs[i] = nil
		}
	}
	return progs, errs
}

// fill writes the metrics' shapes and the sites' tables.
func (g *group) fill(ms []*Metric) error {
	for i, m := range ms {
		sh := shapeOf(m)
		if err := g.coll.Maps["metrics"].Put(uint32(i), &sh); err != nil {
			return fmt.Errorf("write the metrics: %w", err)
		}
	}
	for _, s := range g.sites {
		var t siteTable
		t.N = uint32(len(s.entries))
		copy(t.Metrics[:], s.entries)
		if err := g.coll.Maps["sites"].Put(s.id, &t); err != nil {
			return fmt.Errorf("write the sites: %w", err)
		}
	}
	return nil
}

// attachWorkers attach sites at once: an attach waits on the kernel's
// uprobe registration more than on a CPU.
const attachWorkers = 8

// attach attaches every site; a site that fails keeps its error.
func (g *group) attach(spec *ebpf.CollectionSpec) {
	var att *usdt.Attacher
	if g.coll.Programs[usdtProgram] != nil {
		var err error
		if att, err = usdt.NewAttacher(spec, g.coll); err != nil {
			for _, s := range g.sites {
				s.err = err
			}
			return
		}
	}
	var watched []follow.Probe
	var wsites []*site
	var named []*site
	// Without BPF cookies (before Linux 5.15) a USDT probe of a
	// position-independent file cannot be attached path-wide (its sites
	// are found by their runtime address in a process): a host watch
	// attaches it in each process that maps the file instead.
	cookie, err := features.Have(features.Cookie)
	if err != nil {
		cookie = true // the path-wide attach says what is missing
	}
	for _, s := range g.sites {
		pr := s.probe
		if !follow.Selector(pr.Target) && (cookie || pr.Kind != record.KindUSDT) {
			named = append(named, s)
			continue
		}
		if !follow.Selector(pr.Target) {
			// A named file watched for want of cookies: refused now,
			// as the path-wide attach would refuse it, when it does not
			// open or lacks the probe (else the watch would wait for
			// a probe that never comes).
			if s.err = att.Find(pr.Target, pr.Provider, pr.Name); s.err != nil {
				continue
			}
		}
		fp := follow.Probe{
			Target: pr.Target, Provider: pr.Provider, Name: pr.Name,
			Program: g.coll.Programs[usdtProgram], Cookie: uint64(s.id),
		}
		if pr.Kind != record.KindUSDT {
			// Every matching file that has the function, as each
			// process maps it. The C calling convention is read
			// there whatever the file: a Go program's registers
			// are not checked for as in attachFunc.
			fp = follow.Probe{
				Target: pr.Target, Function: pr.Func, Return: pr.Kind == record.KindUretprobe,
				Program: g.coll.Programs[funcProgram], Cookie: s.cookie(), Skip: s.skipped,
			}
		}
		watched = append(watched, fp)
		wsites = append(wsites, s)
	}
	// The function sites of one file and kind share one attachment
	// where they can; the others attach each on its own.
	byFile := map[string][]*site{}
	var files []string
	for _, s := range named {
		if s.probe.Kind == record.KindUSDT {
			continue
		}
		k := fmt.Sprintf("%d\x00%s", s.probe.Kind, s.probe.Target)
		if byFile[k] == nil {
			files = append(files, k)
		}
		byFile[k] = append(byFile[k], s)
	}
	var shared [][]*site
	for _, k := range files {
		if len(byFile[k]) > 1 {
			shared = append(shared, byFile[k])
		}
	}
	each(shared, attachWorkers, func(ss []*site) { attachShared(g.coll.Programs[funcProgram], ss) })
	named = slices.DeleteFunc(named, func(s *site) bool { return s.link != nil })
	each(named, attachWorkers, func(s *site) {
		if s.probe.Kind == record.KindUSDT {
			s.link, s.err = att.Attach(g.coll.Programs[usdtProgram], s.probe.Target, s.probe.Provider, s.probe.Name, &usdt.Options{Cookie: uint64(s.id)})
		} else {
			s.link, s.err = attachFunc(g.coll.Programs[funcProgram], s, s.skipped)
		}
	})
	if len(watched) > 0 {
		w, err := follow.WatchHost(watched, &follow.Options{Attacher: att, Notify: g.notify})
		if err != nil {
			for _, s := range wsites {
				s.err = err
			}
			return
		}
		g.watch = w
	}
}

// cookie is the BPF cookie of a function site: its index, and where its
// arguments are from bit 32.
func (s *site) cookie() uint64 { return uint64(s.id) | s.from<<32 }

// siteOf is the site of a watch event's probe (its cookie's low half).
func (g *group) siteOf(e follow.Event) *site {
	if e.Probe == nil {
		return nil
	}
	id := uint32(e.Probe.Cookie)
	if int(id) >= len(g.sites) {
		return nil
	}
	return g.sites[id]
}

// notify keeps the sites' watched in line with the watch's attachments
// and passes the failures on to the metrics of the site. The watch calls
// it with its own lock held: it takes only g.mu, and failed only locks
// that no caller holds while calling into the watch.
func (g *group) notify(e follow.Event) {
	s := g.siteOf(e)
	if s == nil {
		return
	}
	switch e.Kind {
	case follow.Attached:
		g.mu.Lock()
		s.watched[e.File] += e.Sites
		g.mu.Unlock()
	case follow.Detached:
		g.mu.Lock()
		if s.watched[e.File] -= e.Sites; s.watched[e.File] <= 0 {
			delete(s.watched, e.File)
		}
		g.mu.Unlock()
	case follow.Failed, follow.Missing:
		for _, p := range s.open() {
			if p.failed != nil {
				p.failed(e)
			}
		}
	}
}

// open returns the metrics of s not closed.
func (s *site) open() []*program {
	var out []*program
	for _, p := range s.users {
		if !p.isClosed() {
			out = append(out, p)
		}
	}
	return out
}

func (p *program) isClosed() bool {
	p.g.mu.Lock()
	defer p.g.mu.Unlock()
	return p.closed
}

// skipped is told each function of a glob left out because it cannot
// take the probe: a failure of that function alone, for each metric of
// the site.
func (s *site) skipped(fn uprobe.Function, err error) {
	for _, p := range s.open() {
		if p.failed != nil {
			p.failed(follow.Event{Kind: follow.Failed, Err: fmt.Errorf("%s skipped: %w", fn, err)})
		}
	}
}

// exportSpec is export.c's collection, parsed once: each group loads a
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

// readsArgs reports whether m reads arguments of its start probe.
func readsArgs(m *Metric) bool {
	if m.Value.Num() > 0 {
		return true
	}
	for _, l := range m.Labels {
		if l.Source == LabelArg {
			return true
		}
	}
	return false
}

// attachFunc attaches prog to the functions s's probe names (a name or
// a glob, resolved as probekit trace resolves it:
// uprobe.Binary.Resolve) as one attachment; s.checkC says a metric reads
// its argument registers, which are C's. Functions of a glob the kernel
// cannot probe are left out (logged by the caller through skip).
func attachFunc(prog *ebpf.Program, s *site, skip func(uprobe.Function, error)) (*attach.Link, error) {
	pr := s.probe
	b, err := uprobe.Open(pr.Target)
	if err != nil {
		return nil, err
	}
	// Attached, the kernel holds what it needs of the file.
	defer b.Close()
	fns, err := b.Resolve(pr.Func)
	if err != nil {
		return nil, err
	}
	if s.checkC {
		for _, fn := range fns {
			if b.Convention(fn) != uprobe.ConventionC {
				return nil, fmt.Errorf("%s: %s is Go code: export reads the C calling convention's argument registers, not Go's", pr.Target, fn)
			}
		}
	}
	opts := &uprobe.Options{Cookie: s.cookie()}
	if len(fns) > 1 {
		opts.Skip = skip
	}
	if pr.Kind == record.KindUretprobe {
		// Uretprobes on native code; on Go, a probe on each return
		// instruction.
		return b.Returns(fns, prog, opts)
	}
	return b.Entries(fns, prog, opts)
}

// attachShared attaches the function sites ss, of one file and one kind
// (entries or returns), as one attachment (one uprobe_multi link where
// the kernel has it), each function with its site's cookie. It attaches
// nothing when they cannot share one: a function in two of them, a name
// that does not resolve, a Go function where C registers are read, or a
// site's one function refused by the kernel. Each is then attached on
// its own, which says what fails.
func attachShared(prog *ebpf.Program, ss []*site) {
	pr := ss[0].probe
	b, err := uprobe.Open(pr.Target)
	if err != nil {
		return
	}
	// Attached, the kernel holds what it needs of the file.
	defer b.Close()
	owner := map[uint64]*site{}
	nfns := map[*site]int{}
	var fns []uprobe.Function
	for _, s := range ss {
		fs, err := b.Resolve(s.probe.Func)
		if err != nil {
			return
		}
		for _, fn := range fs {
			if owner[fn.Address] != nil || s.checkC && b.Convention(fn) != uprobe.ConventionC {
				return
			}
			owner[fn.Address] = s
		}
		nfns[s] = len(fs)
		fns = append(fns, fs...)
	}
	type skip struct {
		fn  uprobe.Function
		err error
	}
	var skips []skip
	alone := false
	opts := &uprobe.Options{
		FunctionCookie: func(fn uprobe.Function) uint64 { return owner[fn.Address].cookie() },
		// Called from this goroutine, during the attach.
		Skip: func(fn uprobe.Function, err error) {
			skips = append(skips, skip{fn, err})
			alone = alone || nfns[owner[fn.Address]] == 1
		},
	}
	var l *attach.Link
	if pr.Kind == record.KindUretprobe {
		l, err = b.Returns(fns, prog, opts)
	} else {
		l, err = b.Entries(fns, prog, opts)
	}
	if err != nil {
		return
	}
	if alone {
		// A site of one function fails when the kernel refuses it.
		l.Close()
		return
	}
	for _, s := range ss {
		s.link = l
	}
	for _, sk := range skips {
		owner[sk.fn.Address].skipped(sk.fn, sk.err)
	}
}

// close ends p's counting: its shape is marked dead in the group's
// metrics map (its sites skip it), the sites no open metric uses are
// detached, and the group is released with its last metric.
func (p *program) close() error {
	g := p.g
	g.mu.Lock()
	if p.closed {
		g.mu.Unlock()
		return nil
	}
	p.closed = true
	g.open--
	last := g.open == 0
	var links []*attach.Link
	var errs []error
	if !last {
		// One field of the shape changes: a hit reading it meanwhile
		// sees the old or the new kind.
		sh := shapeOf(p.m)
		sh.Kind = uint32(kindDead)
		if err := g.coll.Maps["metrics"].Put(p.id, &sh); err != nil {
			errs = append(errs, fmt.Errorf("mark the metric closed: %w", err))
		}
	}
	sites := p.at
	if last {
		sites = g.sites
	}
	for _, s := range sites {
		if s.link == nil || !last && s.used() {
			continue
		}
		// A link shared by sites of one file is closed with the last
		// of them.
		l, shared := s.link, false
		for _, o := range g.sites {
			shared = shared || o.link == l && !last && o.used()
		}
		if !shared {
			for _, o := range g.sites {
				if o.link == l {
					o.link = nil
				}
			}
			links = append(links, l)
		}
	}
	var watch *follow.Watch
	if last {
		watch, g.watch = g.watch, nil
	}
	g.mu.Unlock()
	if watch != nil {
		errs = append(errs, watch.Close())
	}
	errs = append(errs, closeLinks(links))
	if last {
		g.coll.Close()
	}
	return errors.Join(errs...)
}

// closeLinks closes links at once: each detach waits for an RCU grace
// period.
func closeLinks(links []*attach.Link) error {
	errs := make([]error, len(links))
	var wg sync.WaitGroup
	for i, l := range links {
		wg.Go(func() { errs[i] = l.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// used reports whether a metric of s is open (under the group's mu).
func (s *site) used() bool {
	for _, u := range s.users {
		if !u.closed {
			return true
		}
	}
	return false
}

// sites returns the number of sites attached per file.
func (p *program) sites() map[string]int {
	out := map[string]int{}
	p.g.mu.Lock()
	defer p.g.mu.Unlock()
	for _, s := range p.at {
		if s.link != nil {
			for _, site := range s.link.Sites() {
				// A function site's link may be shared: its cookie
				// says whose a location is.
				if s.probe.Kind == record.KindUSDT || site.Cookie == s.cookie() {
					out[site.Path]++
				}
			}
		}
		for f, n := range s.watched {
			out[f] += n
		}
	}
	return out
}

// series is one series read: its label values and its totals over the
// CPUs.
type series struct {
	labels []string
	value  seriesValue
}

// maxSeriesRead bounds the entries one read takes from the series map,
// above what it can hold (the bound keeps a changing map from being
// walked forever).
const maxSeriesRead = 1 << 24

// snapshot returns the labelled series of the group by metric, read once
// for the scrape gen.
func (g *group) snapshot(gen uint64) (map[uint32][]keyedSeries, error) {
	if g.snap != nil && g.snapGen == gen {
		return g.snap, nil
	}
	out := map[uint32][]keyedSeries{}
	var k seriesKey
	var per []seriesValue
	it := g.coll.Maps["series"].Iterate()
	for n := 0; it.Next(&k, &per); n++ {
		if n >= maxSeriesRead {
			break
		}
		out[k.Metric] = append(out[k.Metric], keyedSeries{k, per})
		per = nil
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the series: %w", err)
	}
	g.snap, g.snapGen = out, gen
	return out, nil
}

// read returns m's series, those with the same label values merged, the
// overflow series (the hits past max_series; nil when there were none)
// and the hits lost by reason. gen names the scrape: the metrics of a
// group read in one scrape share one walk of its series map.
//
// A series of a labelled metric whose count has not changed for
// m.SeriesIdle is evicted: deleted from the map, not returned, counted
// in p.evicted. now is the time of the read.
func (p *program) read(m *Metric, now time.Time, gen uint64) (map[string]*series, *series, [len(lostReasons)]uint64, error) {
	g := p.g
	g.readMu.Lock()
	defer g.readMu.Unlock()
	var lost [len(lostReasons)]uint64
	out := map[string]*series{}
	var per []seriesValue
	if len(m.Labels) == 0 {
		err := g.coll.Maps["series"].Lookup(&seriesKey{Metric: p.id}, &per)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, nil, lost, fmt.Errorf("read the series: %w", err)
		}
		addSeries(out, nil, per)
	} else {
		snap, err := g.snapshot(gen)
		if err != nil {
			return nil, nil, lost, err
		}
		var idle []seriesKey
		var invalid uint64
		evicts := m.SeriesIdle > 0
		present := make(map[seriesKey]bool, len(p.seen))
		for _, ks := range snap[p.id] {
			if evicts {
				var count uint64
				for i := range ks.per {
					count += ks.per[i].Count
				}
				s, ok := p.seen[ks.key]
				if !ok || s.count != count {
					s = seenSeries{count: count, changed: now}
					p.seen[ks.key] = s
				}
				present[ks.key] = true
				if now.Sub(s.changed) >= m.SeriesIdle {
					idle = append(idle, ks.key)
					continue
				}
			}
			k := ks.key
			n := addSeries(out, labelValues(m, &k), ks.per)
			if replaced(m, &k) {
				invalid += n
			}
		}
		p.invalid = invalid
		// Deleted after the walk: a delete during it may restart it. A
		// hit on another CPU between the read and the delete is lost
		// with the series; the series was idle for m.SeriesIdle before
		// it.
		evicted := p.evicted
		for _, k := range idle {
			if err := g.coll.Maps["series"].Delete(&k); err == nil {
				p.evicted++
			}
			delete(p.seen, k)
		}
		if p.evicted != evicted {
			// The room the metric has again: export.c adds a series
			// while it has fewer than max_series above evicted.
			if err := g.coll.Maps["evicted"].Put(p.id, p.evicted); err != nil {
				return nil, nil, lost, fmt.Errorf("count the evicted series: %w", err)
			}
		}
		for k := range p.seen {
			if !present[k] {
				delete(p.seen, k)
			}
		}
		snap[p.id] = nil
	}
	if err := g.coll.Maps["other"].Lookup(p.id, &per); err != nil {
		return nil, nil, lost, fmt.Errorf("read the series other: %w", err)
	}
	overflow := map[string]*series{}
	addSeries(overflow, otherValues(m), per)
	var n []uint64
	for i := range lost {
		if err := g.coll.Maps["errors"].Lookup(p.id*uint32(len(lostReasons))+uint32(i), &n); err != nil {
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
			vals[i] = validLabel(string(s))
		} else {
			vals[i] = strconv.FormatInt(k.Nums[i], 10)
		}
	}
	return vals
}

// validLabel is s with each run of bytes that is not UTF-8 replaced by
// U+FFFD: Prometheus label values are UTF-8, and client_golang refuses a
// series with another value. Values that differ only there become one
// series.
func validLabel(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// replaced reports whether labels of m came from bytes that were not
// UTF-8 (validLabel changed them): the string label held U+FFFD where
// the kernel's bytes had none.
func replaced(m *Metric, k *seriesKey) bool {
	for _, l := range m.Labels {
		if l.String || l.Source == LabelComm {
			s := k.Str[:]
			if n := bytes.IndexByte(s, 0); n >= 0 {
				s = s[:n]
			}
			return !utf8.Valid(s)
		}
	}
	return false
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

// invalidLabels returns the hits, in the series read last, whose string
// label was not UTF-8 (validLabel).
func (p *program) invalidLabels() uint64 {
	p.g.readMu.Lock()
	defer p.g.readMu.Unlock()
	return p.invalid
}

// evictions returns the number of series evicted.
func (p *program) evictions() uint64 {
	p.g.readMu.Lock()
	defer p.g.readMu.Unlock()
	return p.evicted
}
