package exporter

import (
	"bytes"
	"compress/gzip"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Limits of the server, against clients that connect, send slowly or
// read slowly (each holds a connection, not memory: every request in
// flight is served from one page gathered for all of them).
const (
	// MaxConnections is the most connections served at once; further
	// ones wait in the listen backlog until one closes.
	MaxConnections = 1024
	// MaxRequestsInFlight is the most scrapes written at once; further
	// ones get 503 Service Unavailable.
	MaxRequestsInFlight = 512
	// readHeaderTimeout and readTimeout drop a client that sends its
	// request slowly; writeTimeout one that reads the page slowly (or
	// not at all); idleTimeout a kept-alive connection left unused.
	// Prometheus's default scrape timeout is 10 s.
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 15 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 8 << 10
)

// page is one gathered and encoded scrape, shared read-only by every
// request that waited for it.
type page struct {
	text, gz []byte
}

// pageServer serves the metrics of a gatherer in the text format. A
// request that arrives while a gather runs waits for that one and is
// served its page; otherwise it starts one. So the memory of a scrape is
// one gather and one page (plain and gzipped), whatever the number of
// clients and however slowly they read: the page is not copied per
// request, and no per-request encoder or compressor is held while a
// client does not read.
type pageServer struct {
	g        prometheus.Gatherer
	log      interface{ Printf(string, ...any) }
	inFlight chan struct{}

	mu     sync.Mutex
	flight *pageFlight

	// buildMu guards the reused encoding state: one gather at a time.
	buildMu sync.Mutex
	buf     bytes.Buffer
	zbuf    bytes.Buffer
	zw      *gzip.Writer
}

type pageFlight struct {
	done chan struct{}
	p    *page
}

func newPageServer(g prometheus.Gatherer, log interface{ Printf(string, ...any) }) *pageServer {
	return &pageServer{g: g, log: log, inFlight: make(chan struct{}, MaxRequestsInFlight)}
}

// get returns a page gathered after the call, or by the gather running
// when it was made.
func (s *pageServer) get() *page {
	s.mu.Lock()
	if f := s.flight; f != nil {
		s.mu.Unlock()
		<-f.done
		return f.p
	}
	f := &pageFlight{done: make(chan struct{})}
	s.flight = f
	s.mu.Unlock()
	f.p = s.build()
	s.mu.Lock()
	s.flight = nil
	s.mu.Unlock()
	close(f.done)
	return f.p
}

// build gathers and encodes a page. The encoding buffers are reused; the
// page gets copies of their contents sized to fit, since slow readers may
// still hold the previous page.
func (s *pageServer) build() *page {
	s.buildMu.Lock()
	defer s.buildMu.Unlock()
	mfs, err := s.g.Gather()
	if err != nil {
		// As promhttp's ContinueOnError: what was gathered is served.
		s.log.Printf("gather: %v", err)
	}
	s.buf.Reset()
	enc := expfmt.NewEncoder(&s.buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			s.log.Printf("encode %s: %v", mf.GetName(), err)
		}
	}
	s.zbuf.Reset()
	if s.zw == nil {
		s.zw, _ = gzip.NewWriterLevel(&s.zbuf, gzip.BestSpeed)
	} else {
		s.zw.Reset(&s.zbuf)
	}
	s.zw.Write(s.buf.Bytes())
	s.zw.Close()
	p := &page{text: bytes.Clone(s.buf.Bytes()), gz: bytes.Clone(s.zbuf.Bytes())}
	// A page much smaller than the last must not keep its buffers.
	if s.buf.Cap() > 4*len(p.text)+64<<10 {
		s.buf = bytes.Buffer{}
		s.zbuf = bytes.Buffer{}
	}
	return p
}

func (s *pageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case s.inFlight <- struct{}{}:
		defer func() { <-s.inFlight }()
	default:
		http.Error(w, "too many scrapes in flight", http.StatusServiceUnavailable)
		return
	}
	p := s.get()
	h := w.Header()
	h.Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	body := p.text
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		body = p.gz
	}
	h.Set("Vary", "Accept-Encoding")
	w.Write(body)
}

// acceptsGzip reports whether an Accept-Encoding header takes gzip: it
// names gzip with no q parameter or a q above 0 (RFC 9110 12.5.3).
func acceptsGzip(v string) bool {
	for part := range strings.SplitSeq(v, ",") {
		name, params, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		for param := range strings.SplitSeq(params, ";") {
			k, val, _ := strings.Cut(strings.TrimSpace(param), "=")
			if strings.EqualFold(k, "q") {
				q, err := strconv.ParseFloat(val, 64)
				return err == nil && q > 0
			}
		}
		return true
	}
	return false
}

// limitListener accepts at most n connections open at once.
type limitListener struct {
	net.Listener
	slots chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: sync.OnceFunc(func() { <-l.slots })}, nil
}

type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
