package exporter

import (
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"go.yaml.in/yaml/v3"

	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/record"
)

// Config is an exporter configuration file, checked.
type Config struct {
	// Path is the file it was read from, for messages.
	Path    string
	Metrics []*Metric
}

// Metric types.
const (
	Counter   = "counter"
	Histogram = "histogram"
)

// Metric is one entry of metrics:.
type Metric struct {
	Name, Help, Type string
	// Probe is where the metric counts; End, for a latency histogram,
	// where each thread's interval from Probe ends.
	Probe, End *Probe
	// ProbeText and EndText are the probes as written.
	ProbeText, EndText string
	// Value is the argument a histogram counts, probe.Arg(N) numbered
	// from 1 as the YAML's value: N; probe.Ret() for a uretprobe's return
	// value; the zero probe.ArgNum for a counter or a latency histogram.
	Value probe.ArgNum
	// Buckets are a histogram's upper bounds, increasing (seconds for a
	// latency histogram).
	Buckets []float64
	// Labels are read from arguments at each hit, in the order written.
	Labels []Label
	// MaxSeries is the most label value combinations kept; further ones
	// add to one series whose label values are all "other" and which has
	// one more label, OverflowLabel="true" (so that a real value "other"
	// stays a series of its own).
	MaxSeries int
	// SeriesIdle is how long a series keeps its place while it counts
	// nothing: at a scrape past that, it is removed from the BPF map
	// (probekit_export_series_evicted_total), so that new label values
	// take its place instead of folding into the overflow series. Zero
	// is DefaultSeriesIdle; a negative duration keeps every series for
	// good. A series evicted that comes back starts from zero, which
	// Prometheus reads as a counter reset.
	SeriesIdle time.Duration
	// Line is where the metric starts in the file.
	Line int
}

// Latency reports whether m is a latency histogram.
func (m *Metric) Latency() bool { return m.End != nil }

// Label is a label whose value is read at each hit of the probe (of the
// start probe of a latency histogram): an argument, or the process.
type Label struct {
	Name string
	// Source is where the value comes from; LabelArg (the zero value)
	// is the argument Arg.
	Source LabelSource
	// Arg is the argument, probe.Arg(N) numbered from 1 as the YAML's
	// arg: N.
	Arg probe.ArgNum
	// String reads the argument as a pointer to a NUL-terminated string
	// (at most LabelStrLen-1 bytes kept), instead of an integer.
	String bool
}

// LabelSource is where a label's value comes from.
type LabelSource uint8

const (
	// LabelArg is an argument of the probe.
	LabelArg LabelSource = iota
	// LabelPID is the process id (the thread group id) of the hit.
	LabelPID
	// LabelComm is the command name of the hit's thread (its comm, at
	// most 15 bytes): a metric's one string label.
	LabelComm
)

// Probe is one PROBE, as `probekit trace` reads it.
type Probe = probe.Spec

// ParseProbe is the ProbeParser of `probekit export`: probe.Parse.
func ParseProbe(s string) (*Probe, error) {
	p, err := probe.Parse(s)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// ProbeParser parses a PROBE of `probekit trace` (the command owns the
// syntax).
type ProbeParser func(string) (*Probe, error)

// Limits of a configuration.
const (
	// MaxMetrics bounds the metrics of one file: each is a BPF program
	// and its maps.
	MaxMetrics = 1024
	// MaxBuckets is the most bucket bounds of a histogram (MAX_BOUNDS
	// in export.c).
	MaxBuckets = 32
	// MaxLabels is the most labels of a metric, of which at most one is
	// a string (export.c's struct series_key).
	MaxLabels = 4
	// DefaultMaxSeries and MaxMaxSeries: label value combinations kept
	// per metric by default and at most (its share of its group's BPF
	// hash map of series).
	DefaultMaxSeries = 100
	MaxMaxSeries     = 10000
	// MaxSeriesMemory bounds the kernel memory the series of a
	// configuration may take (Config.Check): the sum over its metrics
	// of max_series (1 for a metric without labels) times a series'
	// size, its key (SeriesKeyBytes) and one value (SeriesValueBytes)
	// per possible CPU, since the map is per CPU. 256 MiB: 10,000
	// series on 64 CPUs take 180 MiB, and the default 100 a metric on
	// 8 CPUs 0.2 MiB.
	MaxSeriesMemory = 256 << 20
	// DefaultSeriesIdle is a series' idle time before eviction by
	// default: longer than any usual scrape interval, so that a series
	// that counts between two scrapes is never evicted.
	DefaultSeriesIdle = 10 * time.Minute
	// MaxConfigSize bounds the file read.
	MaxConfigSize = 4 << 20
	// maxArgs is the most arguments a USDT probe has; a function probe
	// reads its first maxFuncArgs argument registers (the C calling
	// convention's on x86-64).
	maxArgs     = record.MaxArgs
	maxFuncArgs = 6
)

// Default buckets: powers of 4 from 1 to 4^15 for values, and from 1 µs
// to about 4 s for latencies (seconds).
var (
	defaultValueBuckets   = expBuckets(1, 4, 16)
	defaultLatencyBuckets = expBuckets(1e-6, 4, 12)
)

func expBuckets(start, factor float64, n int) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = start
		start *= factor
	}
	return b
}

// ConfigError is a mistake in a configuration: where it is (the file
// and line of a file; the metric's name in a Config built in Go) and
// which field.
type ConfigError struct {
	// Path is the file; "" for a Config built in Go without one.
	Path string
	// Line is the line in the file; 0 for a Config built in Go.
	Line int
	// Metric is the name of the metric at fault, when it has one.
	Metric string
	Field  string // "metrics[2].value"; "" for the file as a whole
	Msg    string
}

// Error reads "PATH:LINE: FIELD: MSG" for a file, and
// "metric "NAME" (FIELD): MSG" for a Config built in Go.
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.Path)
	if e.Line > 0 {
		if e.Path == "" {
			b.WriteString("line")
		}
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	switch {
	case e.Line == 0 && e.Metric != "" && e.Field != "":
		fmt.Fprintf(&b, "metric %q (%s): ", e.Metric, e.Field)
	case e.Line == 0 && e.Metric != "":
		fmt.Fprintf(&b, "metric %q: ", e.Metric)
	case e.Field != "":
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// where names m in messages: its line in its file, or its name.
func where(m *Metric) string {
	if m.Line > 0 {
		return fmt.Sprintf("%s (line %d)", m.Name, m.Line)
	}
	return m.Name
}

// LoadConfig reads and checks the configuration file at path.
func LoadConfig(path string, parse ProbeParser) (*Config, error) {
	// Regular files only, opened without blocking: a FIFO given as the
	// configuration would otherwise hang the start, or a reload and with
	// it the signal loop.
	f, err := procmaps.OpenFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(data) > MaxConfigSize {
		return nil, &ConfigError{Path: path, Msg: fmt.Sprintf("larger than %d bytes", MaxConfigSize)}
	}
	return ParseConfig(path, data, parse)
}

// ParseConfig checks a configuration read from path.
func ParseConfig(path string, data []byte, parse ProbeParser) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line, msg := yamlError(err)
		return nil, &ConfigError{Path: path, Line: line, Msg: msg}
	}
	p := &configParser{path: path, parse: parse}
	cfg := &Config{Path: path}
	if len(doc.Content) == 0 {
		return nil, p.errorf(nil, "", "empty file: want a mapping with metrics:")
	}
	root := doc.Content[0]
	fields, err := p.mapping(root, "", []string{"metrics"})
	if err != nil {
		return nil, err
	}
	list := fields["metrics"]
	if list == nil {
		return nil, p.errorf(root, "metrics", "missing: want a list of metrics")
	}
	if list.Kind != yaml.SequenceNode {
		return nil, p.errorf(list, "metrics", "want a list of metrics")
	}
	if len(list.Content) == 0 {
		return nil, p.errorf(list, "metrics", "empty: want at least one metric")
	}
	if len(list.Content) > MaxMetrics {
		return nil, p.errorf(list, "metrics", "%d metrics, at most %d", len(list.Content), MaxMetrics)
	}
	for i, n := range list.Content {
		m, err := p.metric(n, fmt.Sprintf("metrics[%d]", i))
		if err != nil {
			return nil, err
		}
		cfg.Metrics = append(cfg.Metrics, m)
	}
	if err := cfg.checkSeriesMemory(); err != nil {
		return nil, err
	}
	if err := cfg.checkNames(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// reservedPrefixes are the names of the metrics an Exporter serves
// itself: its health metrics and, in its own registry, the Go runtime's
// and the process's collectors. A configured metric of such a name would
// be dropped at the scrape.
var reservedPrefixes = []string{"probekit_export_", "go_", "process_", "promhttp_"}

// exposedNames are the sample names metric m writes in the text
// exposition format: a histogram NAME writes NAME_bucket, NAME_sum and
// NAME_count.
func exposedNames(m *Metric) []string {
	if m.Type == Histogram {
		return []string{m.Name, m.Name + "_bucket", m.Name + "_sum", m.Name + "_count"}
	}
	return []string{m.Name}
}

// checkNames refuses a metric whose name is reserved, or whose samples
// have the name of another metric's samples: the registry would drop
// both at the scrape while the page is still served.
func (c *Config) checkNames() error {
	taken := map[string]*Metric{}
	index := map[*Metric]int{}
	for i, m := range c.Metrics {
		index[m] = i
		field := fmt.Sprintf("metrics[%d].name", i)
		for _, r := range reservedPrefixes {
			if strings.HasPrefix(m.Name, r) {
				return &ConfigError{Path: c.Path, Line: m.Line, Metric: m.Name, Field: field,
					Msg: fmt.Sprintf("%q: names starting with %s are the exporter's own (%s)", m.Name, r, strings.Join(reservedPrefixes, ", "))}
			}
		}
		for _, n := range exposedNames(m) {
			if o := taken[n]; o != nil {
				what := fmt.Sprintf("%q is defined twice", m.Name)
				if o.Name != m.Name || n != m.Name {
					what = fmt.Sprintf("%q writes samples named %s, as %q does", m.Name, n, o.Name)
				}
				first := fmt.Sprintf("first on line %d", o.Line)
				if o.Line == 0 {
					first = fmt.Sprintf("first as metrics[%d]", index[o])
				}
				return &ConfigError{Path: c.Path, Line: m.Line, Metric: m.Name, Field: field,
					Msg: fmt.Sprintf("%s (%s)", what, first)}
			}
		}
		for _, n := range exposedNames(m) {
			taken[n] = m
		}
	}
	return nil
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// yamlError splits a YAML syntax error into its line and message.
func yamlError(err error) (int, string) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n, msg[len(m[0]):]
	}
	return 0, strings.TrimPrefix(msg, "yaml: ")
}

type configParser struct {
	path  string
	parse ProbeParser
}

func (p *configParser) errorf(n *yaml.Node, field, format string, args ...any) error {
	e := &ConfigError{Path: p.path, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line = n.Line
	}
	return e
}

// mapping returns n's fields by key, refusing keys not in known and keys
// given twice.
func (p *configParser) mapping(n *yaml.Node, field string, known []string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, field, "want a mapping (key: value)")
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := join(field, k.Value)
		if !slices.Contains(known, k.Value) {
			return nil, p.errorf(k, name, "unknown field (want one of %s)", strings.Join(known, ", "))
		}
		if _, ok := out[k.Value]; ok {
			return nil, p.errorf(k, name, "given twice")
		}
		out[k.Value] = v
	}
	return out, nil
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func (p *configParser) str(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", p.errorf(n, field, "want a string")
	}
	return n.Value, nil
}

var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

var metricFields = []string{"name", "help", "type", "probe", "value", "buckets", "end", "labels", "max_series", "series_idle"}

func (p *configParser) metric(n *yaml.Node, field string) (*Metric, error) {
	f, err := p.mapping(n, field, metricFields)
	if err != nil {
		return nil, err
	}
	m := &Metric{Line: n.Line, MaxSeries: DefaultMaxSeries, SeriesIdle: DefaultSeriesIdle}
	for _, k := range []string{"name", "type", "probe"} {
		if f[k] == nil {
			return nil, p.errorf(n, join(field, k), "missing")
		}
	}
	if m.Name, err = p.str(f["name"], join(field, "name")); err != nil {
		return nil, err
	}
	if !metricName.MatchString(m.Name) {
		return nil, p.errorf(f["name"], join(field, "name"), "%q is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)", m.Name)
	}
	if f["help"] != nil {
		if m.Help, err = p.str(f["help"], join(field, "help")); err != nil {
			return nil, err
		}
	}
	if m.Type, err = p.str(f["type"], join(field, "type")); err != nil {
		return nil, err
	}
	if m.Type != Counter && m.Type != Histogram {
		return nil, p.errorf(f["type"], join(field, "type"), "%q: want counter or histogram", m.Type)
	}
	if m.Probe, m.ProbeText, err = p.probe(f["probe"], join(field, "probe")); err != nil {
		return nil, err
	}
	if v := f["end"]; v != nil {
		if m.Type != Histogram {
			return nil, p.errorf(v, join(field, "end"), "only a histogram measures latency")
		}
		if m.End, m.EndText, err = p.probe(v, join(field, "end")); err != nil {
			return nil, err
		}
	}
	if err := p.value(m, f["value"], n, join(field, "value")); err != nil {
		return nil, err
	}
	if err := p.buckets(m, f["buckets"], join(field, "buckets")); err != nil {
		return nil, err
	}
	if err := p.labels(m, f["labels"], join(field, "labels")); err != nil {
		return nil, err
	}
	if v := f["max_series"]; v != nil {
		s, err := p.str(v, join(field, "max_series"))
		if err != nil {
			return nil, err
		}
		if m.MaxSeries, err = strconv.Atoi(s); err != nil || m.MaxSeries < 1 || m.MaxSeries > MaxMaxSeries {
			return nil, p.errorf(v, join(field, "max_series"), "%q: want a number from 1 to %d", s, MaxMaxSeries)
		}
	}
	if v := f["series_idle"]; v != nil {
		s, err := p.str(v, join(field, "series_idle"))
		if err != nil {
			return nil, err
		}
		if s == "never" {
			m.SeriesIdle = -1
		} else if m.SeriesIdle, err = time.ParseDuration(s); err != nil || m.SeriesIdle <= 0 {
			return nil, p.errorf(v, join(field, "series_idle"), "%q: want a positive duration (90s, 10m) or never", s)
		}
	}
	return m, nil
}

func (p *configParser) probe(n *yaml.Node, field string) (*Probe, string, error) {
	s, err := p.str(n, field)
	if err != nil {
		return nil, "", err
	}
	pr, err := p.parse(s)
	if err != nil {
		return nil, "", p.errorf(n, field, "%v", err)
	}
	return pr, s, nil
}

// argLimit is how many arguments the probe of kind k gives a metric.
func argLimit(k record.Kind) int {
	switch k {
	case record.KindUSDT:
		return maxArgs
	case record.KindUprobe:
		return maxFuncArgs
	}
	return 0
}

// argument reads an argument number (from 1) of the probe pr.
func (p *configParser) argument(n *yaml.Node, field string, pr *Probe) (probe.ArgNum, error) {
	s, err := p.str(n, field)
	if err != nil {
		return probe.ArgNum{}, err
	}
	limit := argLimit(pr.Kind)
	if pr.Kind == record.KindUretprobe {
		return probe.ArgNum{}, p.errorf(n, field, "%q: a uretprobe has only its return value (ret)", s)
	}
	a, err := strconv.Atoi(s)
	if err != nil || a < 1 || a > limit {
		return probe.ArgNum{}, p.errorf(n, field, "%q: want an argument number from 1 to %d", s, limit)
	}
	return probe.Arg(a), nil
}

func (p *configParser) value(m *Metric, n, mn *yaml.Node, field string) error {
	switch {
	case n == nil && m.Type == Histogram && !m.Latency():
		return p.errorf(mn, field, "missing: a histogram counts an argument (value: N, or ret) or a latency (end: PROBE)")
	case n == nil:
		return nil
	case m.Type == Counter:
		return p.errorf(n, field, "a counter counts hits: value is for histograms")
	case m.Latency():
		return p.errorf(n, field, "a latency histogram (end:) measures time: no value")
	}
	if n.Value == "ret" && n.Kind == yaml.ScalarNode {
		if m.Probe.Kind != record.KindUretprobe {
			return p.errorf(n, field, "ret: only a uretprobe has a return value")
		}
		m.Value = probe.Ret()
		return nil
	}
	if m.Probe.Kind == record.KindUretprobe {
		return p.errorf(n, field, "%q: a uretprobe has only its return value (ret)", n.Value)
	}
	a, err := p.argument(n, field, m.Probe)
	if err != nil {
		return err
	}
	m.Value = a
	return nil
}

func (p *configParser) buckets(m *Metric, n *yaml.Node, field string) error {
	if n == nil {
		if m.Type == Histogram {
			m.Buckets = defaultValueBuckets
			if m.Latency() {
				m.Buckets = defaultLatencyBuckets
			}
		}
		return nil
	}
	if m.Type != Histogram {
		return p.errorf(n, field, "only a histogram has buckets")
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 || len(n.Content) > MaxBuckets {
		return p.errorf(n, field, "want a list of 1 to %d increasing numbers", MaxBuckets)
	}
	for i, e := range n.Content {
		v, err := strconv.ParseFloat(e.Value, 64)
		if e.Kind != yaml.ScalarNode || err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return p.errorf(e, fmt.Sprintf("%s[%d]", field, i), "%q: want a finite number", e.Value)
		}
		if m.Latency() && v <= 0 {
			return p.errorf(e, fmt.Sprintf("%s[%d]", field, i), "%v: a latency bound is a positive number of seconds", v)
		}
		if i > 0 && v <= m.Buckets[i-1] {
			return p.errorf(e, fmt.Sprintf("%s[%d]", field, i), "%v: want bounds in increasing order", v)
		}
		m.Buckets = append(m.Buckets, v)
	}
	return nil
}

var labelFields = []string{"arg", "string", "source"}

func (p *configParser) labels(m *Metric, n *yaml.Node, field string) error {
	if n == nil {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return p.errorf(n, field, "want a mapping of label names to {arg: N, string: BOOL} or {source: pid|comm}")
	}
	if len(n.Content)/2 > MaxLabels {
		return p.errorf(n, field, "%d labels, at most %d", len(n.Content)/2, MaxLabels)
	}
	strs := 0
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		lf := join(field, k.Value)
		if !labelName.MatchString(k.Value) || k.Value == "le" || k.Value == OverflowLabel || strings.HasPrefix(k.Value, "__") {
			return p.errorf(k, lf, "%q is not a label name this metric can have", k.Value)
		}
		for _, l := range m.Labels {
			if l.Name == k.Value {
				return p.errorf(k, lf, "given twice")
			}
		}
		f, err := p.mapping(v, lf, labelFields)
		if err != nil {
			return err
		}
		l := Label{Name: k.Value}
		if src := f["source"]; src != nil {
			switch src.Value {
			case "pid":
				l.Source = LabelPID
			case "comm":
				l.Source = LabelComm
			case "arg":
			default:
				return p.errorf(src, join(lf, "source"), "%q: want pid, comm or arg", src.Value)
			}
			if l.Source != LabelArg && (f["arg"] != nil || f["string"] != nil) {
				return p.errorf(src, join(lf, "source"), "source %s reads no argument: no arg or string", src.Value)
			}
		}
		if l.Source == LabelArg && f["arg"] == nil {
			return p.errorf(v, join(lf, "arg"), "missing")
		}
		if l.Source == LabelArg {
			if l.Arg, err = p.argument(f["arg"], join(lf, "arg"), m.Probe); err != nil {
				return err
			}
		}
		if s := f["string"]; s != nil {
			var b bool
			if err := s.Decode(&b); err != nil {
				return p.errorf(s, join(lf, "string"), "%q: want true or false", s.Value)
			}
			l.String = b
		}
		if l.String || l.Source == LabelComm {
			if strs++; strs > 1 {
				return p.errorf(k, lf, "at most one label is a string (comm is one)")
			}
		}
		m.Labels = append(m.Labels, l)
	}
	return nil
}

// Check makes a configuration built in Go (not read from a file) ready
// for Apply and refuses what a file would be refused for. It fills the
// defaults a file leaves out: MaxSeries 0 is DefaultMaxSeries, a
// histogram without Buckets has the default ones, and Value is the zero
// probe.ArgNum where it is not read (a counter, a latency histogram). ProbeText, when
// empty, is the probe as written by probe.Spec's syntax.
func (c *Config) Check() error {
	if len(c.Metrics) == 0 || len(c.Metrics) > MaxMetrics {
		return &ConfigError{Path: c.Path, Field: "metrics", Msg: fmt.Sprintf("%d metrics: want 1 to %d", len(c.Metrics), MaxMetrics)}
	}
	for i, m := range c.Metrics {
		if m == nil {
			return &ConfigError{Path: c.Path, Field: fmt.Sprintf("metrics[%d]", i), Msg: "nil metric"}
		}
		if err := m.check(); err != nil {
			return &ConfigError{Path: c.Path, Line: m.Line, Metric: m.Name, Field: fmt.Sprintf("metrics[%d]", i), Msg: err.Error()}
		}
	}
	if err := c.checkSeriesMemory(); err != nil {
		return err
	}
	return c.checkNames()
}

// Sizes of export.c's struct series_key and struct series: a series
// takes SeriesKeyBytes plus SeriesValueBytes per possible CPU in the
// kernel (see MaxSeriesMemory).
const (
	SeriesKeyBytes   = 8 + 8*MaxLabels + LabelStrLen
	SeriesValueBytes = 8 + 8 + 8*(MaxBuckets+1)
)

// seriesCPUs is the number of possible CPUs, each with its own value of
// every series.
var seriesCPUs = sync.OnceValue(func() int {
	n, err := ebpf.PossibleCPU()
	if err != nil || n < 1 {
		return 1
	}
	return n
})

// checkSeriesMemory refuses a configuration whose series would take
// more than MaxSeriesMemory, naming the metric that crosses it.
func (c *Config) checkSeriesMemory() error {
	per := uint64(SeriesKeyBytes + SeriesValueBytes*seriesCPUs())
	var series uint64
	for i, m := range c.Metrics {
		n := uint64(1)
		if len(m.Labels) > 0 {
			n = uint64(m.MaxSeries)
		}
		series += n
		if series*per > MaxSeriesMemory {
			return &ConfigError{Path: c.Path, Line: m.Line, Metric: m.Name, Field: fmt.Sprintf("metrics[%d].max_series", i),
				Msg: fmt.Sprintf("the metrics up to this one keep %d series, %.1f MiB of kernel memory on %d CPUs (%d bytes each): above the ceiling of %d MiB (exporter.MaxSeriesMemory); lower max_series", series, float64(series*per)/(1<<20), seriesCPUs(), per, MaxSeriesMemory>>20)}
		}
	}
	return nil
}

// check is Config.Check for one metric.
func (m *Metric) check() error {
	switch {
	case !metricName.MatchString(m.Name):
		return fmt.Errorf("name %q is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)", m.Name)
	case m.Type != Counter && m.Type != Histogram:
		return fmt.Errorf("type %q: want counter or histogram", m.Type)
	case m.Probe == nil:
		return errors.New("no probe")
	case m.End != nil && m.Type != Histogram:
		return errors.New("end: only a histogram measures latency")
	case m.MaxSeries < 0 || m.MaxSeries > MaxMaxSeries:
		return fmt.Errorf("max_series %d: want 1 to %d", m.MaxSeries, MaxMaxSeries)
	case len(m.Labels) > MaxLabels:
		return fmt.Errorf("%d labels, at most %d", len(m.Labels), MaxLabels)
	}
	for _, p := range []*Probe{m.Probe, m.End} {
		if p == nil {
			continue
		}
		if err := checkProbe(p); err != nil {
			return err
		}
	}
	if m.ProbeText == "" {
		m.ProbeText = probeText(m.Probe)
	}
	if m.End != nil && m.EndText == "" {
		m.EndText = probeText(m.End)
	}
	if m.MaxSeries == 0 {
		m.MaxSeries = DefaultMaxSeries
	}
	if m.SeriesIdle == 0 {
		m.SeriesIdle = DefaultSeriesIdle
	}
	switch {
	case m.Type == Counter || m.Latency():
		m.Value = probe.ArgNum{}
	case m.Value.IsRet() && m.Probe.Kind != record.KindUretprobe:
		return errors.New("value ret: only a uretprobe has a return value")
	case !m.Value.IsRet() && m.Probe.Kind == record.KindUretprobe:
		return errors.New("value: a uretprobe has only its return value (probe.Ret())")
	case m.Value.IsZero():
		return fmt.Errorf("value: a histogram counts an argument: want probe.Arg(1) to probe.Arg(%d)", argLimit(m.Probe.Kind))
	case !m.Value.IsRet() && (m.Value.Check() != nil || m.Value.Num() > argLimit(m.Probe.Kind)):
		return fmt.Errorf("value %s: want probe.Arg(1) to probe.Arg(%d), numbered from 1", m.Value, argLimit(m.Probe.Kind))
	}
	if m.Type == Histogram && m.Buckets == nil {
		m.Buckets = defaultValueBuckets
		if m.Latency() {
			m.Buckets = defaultLatencyBuckets
		}
	}
	if m.Type != Histogram && m.Buckets != nil {
		return errors.New("buckets: only a histogram has buckets")
	}
	if len(m.Buckets) > MaxBuckets {
		return fmt.Errorf("%d buckets, at most %d", len(m.Buckets), MaxBuckets)
	}
	for i, b := range m.Buckets {
		switch {
		case math.IsNaN(b) || math.IsInf(b, 0):
			return fmt.Errorf("buckets[%d]: %v: want a finite number", i, b)
		case m.Latency() && b <= 0:
			return fmt.Errorf("buckets[%d]: %v: a latency bound is a positive number of seconds", i, b)
		case i > 0 && b <= m.Buckets[i-1]:
			return fmt.Errorf("buckets[%d]: %v: want bounds in increasing order", i, b)
		}
	}
	strs := 0
	for i, l := range m.Labels {
		if !labelName.MatchString(l.Name) || l.Name == "le" || l.Name == OverflowLabel || strings.HasPrefix(l.Name, "__") {
			return fmt.Errorf("labels[%d]: %q is not a label name this metric can have", i, l.Name)
		}
		for _, o := range m.Labels[:i] {
			if o.Name == l.Name {
				return fmt.Errorf("labels[%d]: %q given twice", i, l.Name)
			}
		}
		switch {
		case l.Source > LabelComm:
			return fmt.Errorf("labels[%d]: unknown source %d", i, l.Source)
		case l.Source != LabelArg && l.String:
			return fmt.Errorf("labels[%d]: source pid or comm reads no argument: String is false", i)
		case l.Source == LabelArg && (l.Arg.IsRet() || l.Arg.Check() != nil || l.Arg.Num() > argLimit(m.Probe.Kind)):
			return fmt.Errorf("labels[%d]: %s: want probe.Arg(1) to probe.Arg(%d), numbered from 1", i, l.Arg, argLimit(m.Probe.Kind))
		case l.Source != LabelArg && !l.Arg.IsZero():
			return fmt.Errorf("labels[%d]: source pid or comm reads no argument: Arg is zero", i)
		}
		if l.String || l.Source == LabelComm {
			if strs++; strs > 1 {
				return fmt.Errorf("labels[%d]: at most one label is a string", i)
			}
		}
	}
	return nil
}

// checkProbe refuses a probe.Spec built in Go that lacks what its kind
// needs.
func checkProbe(p *Probe) error {
	switch p.Kind {
	case record.KindUSDT:
		if p.Target == "" || p.Provider == "" || p.Name == "" {
			return fmt.Errorf("probe %+v: a USDT probe needs Target, Provider and Name", *p)
		}
	case record.KindUprobe, record.KindUretprobe:
		if p.Target == "" || p.Func == "" {
			return fmt.Errorf("probe %+v: a function probe needs Target and Func", *p)
		}
	default:
		return fmt.Errorf("probe %+v: unknown kind", *p)
	}
	return nil
}

// probeText writes p in the PROBE syntax.
func probeText(p *Probe) string {
	switch p.Kind {
	case record.KindUprobe:
		return probe.UprobePrefix + p.Target + ":" + p.Func
	case record.KindUretprobe:
		return probe.UretprobePrefix + p.Target + ":" + p.Func
	}
	return p.Target + ":" + p.Provider + ":" + p.Name
}
