package exporter

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/probekit/probekit/follow"
	"github.com/probekit/probekit/procmaps"
)

// Options configure an Exporter.
type Options struct {
	// Log receives attach failures and reloads; nil discards them.
	Log *log.Logger
	// NoRuntimeMetrics leaves out the process_* and go_* collectors
	// (benchmarks of the scrape).
	NoRuntimeMetrics bool
}

// Exporter serves the metrics of a configuration. Its methods are safe
// for concurrent use.
type Exporter struct {
	log *log.Logger
	reg *prometheus.Registry

	mu      sync.RWMutex
	metrics []*metricState
	// errMu guards attachErrors; it is taken under mu and in the
	// notifications of a metric's watch, never the other way round.
	errMu sync.Mutex
	// attachErrors counts the failed attaches by metric name, across
	// reloads, those in one process of a "*" or glob target included.
	attachErrors map[string]uint64
	// attachExited counts, by metric name, the processes of a "*" or
	// glob target that exited before their attach: not errors.
	attachExited map[string]uint64
	reloads      [2]uint64 // successes, failures
	readErrors   atomic.Uint64
	// scrapes numbers the Collects (the metrics of a group share one
	// read of its series in each).
	scrapes atomic.Uint64

	srv *http.Server

	pagesOnce sync.Once
	pages     *pageServer

	procs processCounts
}

// processCountTTL is how long a count of the processes mapping a file
// serves scrapes: each count reads the maps of every process.
const processCountTTL = 10 * time.Second

// maxProcessCounts bounds the files processCounts keeps: a glob target
// on a host where programs come and go names new files without end.
// Past it, counts older than processCountTTL are dropped, and when none
// is, a file's count is not kept.
const maxProcessCounts = 4096

// processCounts caches, per file, how many processes map it.
type processCounts struct {
	mu    sync.Mutex
	at    map[string]time.Time
	count map[string]int
}

// get returns how many processes map the file at path, as counted at
// most processCountTTL ago.
func (c *processCounts) get(path string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if at, ok := c.at[path]; ok && now.Sub(at) < processCountTTL {
		return c.count[path], nil
	}
	pids, _, err := procmaps.FindPIDs(path)
	if err != nil {
		return 0, err
	}
	if c.at == nil {
		c.at, c.count = map[string]time.Time{}, map[string]int{}
	}
	if _, ok := c.at[path]; !ok && len(c.at) >= maxProcessCounts {
		for p, at := range c.at {
			if now.Sub(at) >= processCountTTL {
				delete(c.at, p)
				delete(c.count, p)
			}
		}
		if len(c.at) >= maxProcessCounts {
			return len(pids), nil
		}
	}
	c.at[path], c.count[path] = now, len(pids)
	return len(pids), nil
}

// metricState is one metric of the configuration in force.
type metricState struct {
	m    *Metric
	prog *program // nil when the load or the attach failed
	err  error
	desc *prometheus.Desc
	// overflowDesc is desc with OverflowLabel, for the series past
	// max_series.
	overflowDesc *prometheus.Desc
}

// New returns an Exporter serving no metric yet (see Apply). The
// registry and its collectors are made here, not at package
// initialisation, so that a command that does not export pays nothing.
func New(opts Options) *Exporter {
	x := &Exporter{log: opts.Log, reg: prometheus.NewPedanticRegistry(), attachErrors: map[string]uint64{}, attachExited: map[string]uint64{}}
	if x.log == nil {
		x.log = log.New(discard{}, "", 0)
	}
	x.reg.MustRegister(x)
	if !opts.NoRuntimeMetrics {
		x.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return x
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

// same reports whether a and b define the same metric (where in the file
// aside).
func same(a, b *Metric) bool {
	ac, bc := *a, *b
	ac.Line, bc.Line = 0, 0
	return reflect.DeepEqual(ac, bc)
}

// ApplyError is what Apply could not do: each metric that failed to
// load or attach, and why. The other metrics of the configuration are
// attached and served.
type ApplyError struct {
	// Failed are the metrics that do not count, in configuration order.
	Failed []*MetricError
	// Metrics is the number of metrics of the configuration.
	Metrics int
}

func (e *ApplyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d metrics not attached: ", len(e.Failed), e.Metrics)
	for i, f := range e.Failed {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.Error())
	}
	return b.String()
}

// Unwrap returns each metric's error, for errors.Is and errors.As.
func (e *ApplyError) Unwrap() []error {
	out := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		out[i] = f
	}
	return out
}

// MetricError is why one metric failed to load or attach.
type MetricError struct {
	// Metric is the metric's name; Line its line in its file (0 for a
	// Config built in Go).
	Metric string
	Line   int
	Err    error
	// Previous says that the metric's previous definition, of the
	// configuration in force before, stays attached and served.
	Previous bool
}

func (e *MetricError) Error() string {
	msg := where(&Metric{Name: e.Metric, Line: e.Line}) + ": " + e.Err.Error()
	if e.Previous {
		msg += " (its previous definition stays attached)"
	}
	return msg
}

func (e *MetricError) Unwrap() error { return e.Err }

// Apply makes cfg the configuration in force: a metric defined as before
// and attached keeps its program, and so its counts; the new ones are
// loaded and attached, then the others detached. A metric that fails to
// load or attach is logged, counted (probekit_export_attach_errors_total)
// and listed in the *ApplyError returned; the others work and are served.
// A changed metric whose new definition fails keeps its previous one
// (MetricError.Previous), so that a reload that cannot load leaves the
// metrics in force counting. A nil error means every metric of cfg is
// attached as cfg defines it. The failures of a
// "*" or glob target in one process, later, are logged and counted, not
// returned.
func (x *Exporter) Apply(cfg *Config) error {
	old := map[string]*metricState{}
	x.mu.RLock()
	for _, s := range x.metrics {
		old[s.m.Name] = s
	}
	x.mu.RUnlock()
	var next []*metricState
	var drop []*metricState
	keep := map[*metricState]bool{}
	for _, m := range cfg.Metrics {
		if s := old[m.Name]; s != nil && s.prog != nil && same(s.m, m) {
			keep[s] = true
			next = append(next, s)
			continue
		}
		next = append(next, &metricState{m: m})
	}
	// The new metrics load first, as one group (one collection, and one
	// attachment per probe they use), while the metrics in force keep
	// counting and are served: a load that fails leaves them attached.
	var load []*metricState
	for _, s := range next {
		if !keep[s] {
			load = append(load, s)
		}
	}
	ms := make([]*Metric, len(load))
	for i, s := range load {
		s.desc, s.overflowDesc = newDesc(s.m)
		ms[i] = s.m
	}
	progs, errs := loadGroup(ms, x.watchFailed)
	for i, s := range load {
		s.prog, s.err = progs[i], errs[i]
	}
	// A changed metric whose new definition failed keeps its previous
	// one, attached, with its counts.
	previous := map[*metricState]bool{}
	for i, s := range next {
		if o := old[s.m.Name]; s.err != nil && o != nil && o.prog != nil && !keep[o] {
			keep[o], previous[s] = true, true
			next[i] = o
		}
	}
	for _, s := range old {
		if !keep[s] {
			drop = append(drop, s)
		}
	}
	var failed []string
	aerr := &ApplyError{Metrics: len(cfg.Metrics)}
	for _, s := range load {
		if s.err != nil {
			kept := ""
			if previous[s] {
				kept = " (its previous definition stays attached)"
			}
			x.log.Printf("%s: %v%s", where(s.m), s.err, kept)
			failed = append(failed, s.m.Name)
			aerr.Failed = append(aerr.Failed, &MetricError{Metric: s.m.Name, Line: s.m.Line, Err: s.err, Previous: previous[s]})
		}
	}
	x.mu.Lock()
	x.metrics = next
	x.errMu.Lock()
	for _, n := range failed {
		x.attachErrors[n]++
	}
	x.errMu.Unlock()
	x.reloads[0]++
	x.mu.Unlock()
	// Detached last: between the swap and the close, a hit of a changed
	// metric counts in both definitions, and only the new one is served.
	closeAll(drop, x.log)
	if len(aerr.Failed) > 0 {
		return aerr
	}
	return nil
}

// watchFailed is told each failure of m's watch in one process: logged
// and counted; the other processes are not affected.
func (x *Exporter) watchFailed(m *Metric) func(follow.Event) {
	return func(e follow.Event) {
		if e.PID == 0 {
			// Not about one process: a probe that no object mapped at
			// the start has (follow.Missing), or a function of a glob
			// left out. Logged, once.
			x.log.Printf("%s: %v", m.Name, e.Err)
			return
		}
		if exited(e.PID) {
			// Not an error: the process ended between its exec or
			// mmap and the attach.
			x.errMu.Lock()
			x.attachExited[m.Name]++
			x.errMu.Unlock()
			return
		}
		x.log.Printf("%s: pid %d: %s: %v", m.Name, e.PID, e.File, e.Err)
		x.errMu.Lock()
		x.attachErrors[m.Name]++
		x.errMu.Unlock()
	}
}

// exited reports whether process pid has ended: it is gone, or a zombie
// (its maps and files are gone, its exit not yet collected).
func exited(pid int) bool {
	if pid <= 0 {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH)
	}
	// The state follows the command name, which is in parentheses and
	// may hold any byte: it is the first field after the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return false
	}
	state := data[i+2]
	return state == 'Z' || state == 'X'
}

// ReloadFailed counts a configuration that could not be applied.
func (x *Exporter) ReloadFailed() {
	x.mu.Lock()
	x.reloads[1]++
	x.mu.Unlock()
}

// Attached returns the names of the metrics attached, in configuration
// order.
func (x *Exporter) Attached() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []string
	for _, s := range x.metrics {
		if s.prog != nil {
			out = append(out, s.m.Name)
		}
	}
	return out
}

// Close detaches every metric and stops the server.
func (x *Exporter) Close() error {
	x.mu.Lock()
	metrics := x.metrics
	x.metrics = nil
	srv := x.srv
	x.mu.Unlock()
	var errs []error
	if srv != nil {
		errs = append(errs, srv.Close())
	}
	errs = append(errs, closeAll(metrics, nil))
	return errors.Join(errs...)
}

// closeWorkers close metrics at once in Apply and Close: a detach waits
// on the kernel's uprobe registration (each for an RCU grace period), so
// more metrics than CPUs are worked on at once.
const closeWorkers = 64

// each calls f on every item, from at most n goroutines at once.
func each[T any](items []T, n int, f func(T)) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, n)
	for _, s := range items {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			f(s)
		})
	}
	wg.Wait()
}

// closeAll detaches the programs of states concurrently; errors are
// logged when log is set, and returned.
func closeAll(states []*metricState, log *log.Logger) error {
	var mu sync.Mutex
	var errs []error
	each(states, closeWorkers, func(s *metricState) {
		if s.prog == nil {
			return
		}
		if err := s.prog.close(); err != nil {
			err = fmt.Errorf("%s: detach: %w", s.m.Name, err)
			if log != nil {
				log.Print(err)
			}
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	return errors.Join(errs...)
}

// Handler serves the metrics in the text exposition format (gzipped when
// the client takes it), at most MaxRequestsInFlight at once. Requests
// that arrive while a gather runs share its page.
func (x *Exporter) Handler() http.Handler {
	x.pagesOnce.Do(func() { x.pages = newPageServer(x.reg, x.log) })
	return x.pages
}

// Serve listens on addr and serves /metrics there. It returns the address
// listened on and a channel receiving the server's error if it stops
// before Close.
func (x *Exporter) Serve(addr string) (<-chan error, net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	ln = &limitListener{Listener: ln, slots: make(chan struct{}, MaxConnections)}
	mux := http.NewServeMux()
	mux.Handle("/metrics", x.Handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "probekit export: metrics at /metrics")
	})
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          x.log,
	}
	x.mu.Lock()
	x.srv = srv
	x.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			done <- err
		}
	}()
	return done, ln.Addr(), nil
}

// newDesc returns the descriptions of m's series and of its overflow
// series.
func newDesc(m *Metric) (desc, overflow *prometheus.Desc) {
	help := m.Help
	if help == "" {
		help = m.ProbeText
	}
	names := make([]string, len(m.Labels))
	for i, l := range m.Labels {
		names[i] = l.Name
	}
	return prometheus.NewDesc(m.Name, help, names, nil),
		prometheus.NewDesc(m.Name, help, append(names, OverflowLabel), nil)
}

// Health metrics.
var (
	attachedDesc = prometheus.NewDesc("probekit_export_metric_attached",
		"Whether the metric's probes are attached (1) or failed to load or attach (0).", []string{"metric"}, nil)
	sitesDesc = prometheus.NewDesc("probekit_export_metric_sites",
		"Probe sites attached, per metric and file (every process that maps the file counts).", []string{"metric", "file"}, nil)
	processesDesc = prometheus.NewDesc("probekit_export_metric_processes",
		"Processes mapping a file the metric is attached to (counted at most every 10 s).", []string{"metric", "file"}, nil)
	attachErrorsDesc = prometheus.NewDesc("probekit_export_attach_errors_total",
		"Failed loads or attaches of the metric, across reloads.", []string{"metric"}, nil)
	attachExitedDesc = prometheus.NewDesc("probekit_export_attach_exited_total",
		"Processes of a \"*\" or glob target that exited before the metric could be attached to them (not errors).", []string{"metric"}, nil)
	lostDesc = prometheus.NewDesc("probekit_export_lost_updates_total",
		"Hits not counted: a value or label unreadable, the maps full, an end probe without its start on the thread, a start whose end never came (start_abandoned); for a \"*\" or glob target, process events the kernel could not queue (process_event_lost).", []string{"metric", "reason"}, nil)
	foldedDesc = prometheus.NewDesc("probekit_export_label_folded_total",
		"Hits counted in the metric's series overflow=\"true\", past its max_series.", []string{"metric"}, nil)
	evictedDesc = prometheus.NewDesc("probekit_export_series_evicted_total",
		"Series removed after counting nothing for the metric's series_idle, making room for new label values.", []string{"metric"}, nil)
	invalidLabelsDesc = prometheus.NewDesc("probekit_export_label_invalid_utf8_hits",
		"Hits counted in the metric's series served now whose string label was not UTF-8: each run of invalid bytes is replaced by U+FFFD.", []string{"metric"}, nil)
	readErrorsDesc = prometheus.NewDesc("probekit_export_read_errors_total",
		"Failed reads of a metric's BPF maps at a scrape.", nil, nil)
	reloadsDesc = prometheus.NewDesc("probekit_export_config_loads_total",
		"Configurations applied (success) or refused on reload (failure).", []string{"result"}, nil)
)

// Describe sends nothing: the metrics change with the configuration, so
// the Exporter is an unchecked collector.
func (x *Exporter) Describe(chan<- *prometheus.Desc) {}

// Collect reads every metric's maps.
func (x *Exporter) Collect(ch chan<- prometheus.Metric) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	gen := x.scrapes.Add(1)
	for _, s := range x.metrics {
		up := 0.0
		if s.prog != nil {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(attachedDesc, prometheus.GaugeValue, up, s.m.Name)
		x.errMu.Lock()
		nerr, nexit := x.attachErrors[s.m.Name], x.attachExited[s.m.Name]
		x.errMu.Unlock()
		ch <- prometheus.MustNewConstMetric(attachErrorsDesc, prometheus.CounterValue, float64(nerr), s.m.Name)
		ch <- prometheus.MustNewConstMetric(attachExitedDesc, prometheus.CounterValue, float64(nexit), s.m.Name)
		if s.prog == nil {
			continue
		}
		sites := s.prog.sites()
		files := make([]string, 0, len(sites))
		for f := range sites {
			files = append(files, f)
		}
		slices.Sort(files)
		for _, f := range files {
			// A path is bytes: made UTF-8 as a string label is.
			ch <- prometheus.MustNewConstMetric(sitesDesc, prometheus.GaugeValue, float64(sites[f]), s.m.Name, validLabel(f))
			if n, err := x.procs.get(f); err == nil {
				ch <- prometheus.MustNewConstMetric(processesDesc, prometheus.GaugeValue, float64(n), s.m.Name, validLabel(f))
			}
		}
		series, over, lost, err := s.prog.read(s.m, time.Now(), gen)
		if err != nil {
			x.readErrors.Add(1)
			ch <- prometheus.NewInvalidMetric(s.desc, err)
			continue
		}
		for i, n := range lost {
			ch <- prometheus.MustNewConstMetric(lostDesc, prometheus.CounterValue, float64(n), s.m.Name, lostReasons[i])
		}
		if w := s.prog.g.watch; w != nil {
			// Processes the watch did not see start or load a library:
			// their files may be attached late or not at all.
			ch <- prometheus.MustNewConstMetric(lostDesc, prometheus.CounterValue, float64(w.Lost()), s.m.Name, "process_event_lost")
		}
		if len(s.m.Labels) > 0 {
			folded := 0.0
			if over != nil {
				folded = float64(over.value.Count)
				ch <- constMetric(s.m, s.overflowDesc, over, "true")
			}
			ch <- prometheus.MustNewConstMetric(foldedDesc, prometheus.CounterValue, folded, s.m.Name)
			ch <- prometheus.MustNewConstMetric(evictedDesc, prometheus.CounterValue, float64(s.prog.evictions()), s.m.Name)
			if slices.ContainsFunc(s.m.Labels, func(l Label) bool { return l.String || l.Source == LabelComm }) {
				ch <- prometheus.MustNewConstMetric(invalidLabelsDesc, prometheus.GaugeValue, float64(s.prog.invalidLabels()), s.m.Name)
			}
		}
		for _, se := range series {
			ch <- constMetric(s.m, s.desc, se)
		}
	}
	ch <- prometheus.MustNewConstMetric(readErrorsDesc, prometheus.CounterValue, float64(x.readErrors.Load()))
	ch <- prometheus.MustNewConstMetric(reloadsDesc, prometheus.CounterValue, float64(x.reloads[0]), "success")
	ch <- prometheus.MustNewConstMetric(reloadsDesc, prometheus.CounterValue, float64(x.reloads[1]), "failure")
}

// constMetric is one series of m, described by desc, as Prometheus reads
// it; extra are label values after the series' own.
func constMetric(m *Metric, desc *prometheus.Desc, se *series, extra ...string) prometheus.Metric {
	v := &se.value
	labels := append(slices.Clip(se.labels), extra...)
	if m.Type == Counter {
		return prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v.Count), labels...)
	}
	scale := 1.0
	if m.Latency() {
		scale = 1e-9
	}
	buckets := make(map[float64]uint64, len(m.Buckets))
	var cum uint64
	for i, b := range m.Buckets {
		cum += v.Buckets[i]
		buckets[b] = cum
	}
	return prometheus.MustNewConstHistogram(desc, v.Count, float64(v.Sum)*scale, buckets, labels...)
}
