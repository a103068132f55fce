// Command vmrun runs the kernel tests on other kernels: it boots Debian's
// 5.10, 6.1 and 6.12 kernels under qemu's software emulation with the
// host's root shared read-only over 9p, runs each package's test binary
// (built on the host with go test -c) as root with
// PROBEKIT_REQUIRE_KERNEL=1, and prints a kernel × package table.
//
//	vmrun [-out DIR] [-timeout D] [-count N] KERNEL[/SHARD][=PATTERN[@REGEXP][!SKIP][#N],...]...
//
// KERNEL is 5.10, 6.1 or 6.12; /SHARD (any name) boots one more VM of
// that kernel for its own share of the tests, run beside the others (-j),
// and the table shows the kernel's shards as one column; PATTERNs are go list patterns (default
// ./...); @REGEXP runs only the matching tests of those packages there
// (go test -run), !SKIP leaves out those matching SKIP (go test -skip),
// #N runs each of them N times (go test -count). The kernels are fetched once with apt-get download under a
// private apt configuration and kept under the user's cache directory.
// vmrun must be built with CGO_ENABLED=0: the same binary is the guest's
// /init. It exits non-zero if any package fails on any kernel.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	if os.Getpid() == 1 || os.Getenv(workerEnv) == "1" {
		guestMain()
		return
	}
	out := flag.String("out", "", "result directory (default: vmrun under the user's cache directory)")
	timeout := flag.Duration("timeout", 50*time.Minute, "time limit of one kernel's run")
	pkgTimeout := flag.Duration("pkg-timeout", 25*time.Minute, "go test -timeout of one package in the guest")
	mem := flag.Int("mem", 2048, "guest memory in MiB")
	jobs := flag.Int("j", 2, "kernels run at once")
	verbose := flag.Bool("v", false, "copy each guest's console to stderr")
	fetchOnly := flag.Bool("fetch", false, "only download the kernels")
	flag.StringVar(&runRE, "run", "", "only the tests matching this regular expression (go test -run)")
	flag.IntVar(&count, "count", 1, "run each test this many times (go test -count)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: vmrun [flags] KERNEL[=PATTERN,...]...  (KERNEL: 5.10, 6.1, 6.12)")
		os.Exit(2)
	}
	if err := hostMain(*out, *timeout, *pkgTimeout, *mem, *jobs, *verbose, *fetchOnly, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "vmrun:", err)
		os.Exit(1)
	}
}

var (
	runRE string
	count int
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "vmrun: "+format+"\n", args...)
}

type kernelRun struct {
	kernel   *kernelDir
	label    string // the kernel's name, then "/" and the shard's if any
	patterns []string
	runs     map[string]string // pattern -> its -run expression
	pkgRun   map[string]string // import path -> its -run expression
	counts   map[string]int    // pattern, then import path -> its -count
	pkgs     []testPkg
	dir      string // result share
	wall     time.Duration
	results  map[string]result
	err      error
}

type testPkg struct {
	Import, Dir, Name, Binary string
}

func hostMain(out string, timeout, pkgTimeout time.Duration, mem, jobs int, verbose, fetchOnly bool, args []string) error {
	if out == "" {
		root, err := cacheRoot()
		if err != nil {
			return err
		}
		out = filepath.Join(filepath.Dir(root), "vmrun")
	}
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	// The guest mounts tmpfs on /tmp and /run: the test binaries and the
	// result share must be elsewhere to be seen.
	for _, hidden := range []string{"/tmp", "/run"} {
		if out == hidden || strings.HasPrefix(out, hidden+"/") {
			return fmt.Errorf("-out %s: the guest has its own %s; choose a directory outside it", out, hidden)
		}
	}
	var runs []*kernelRun
	for _, a := range args {
		label, pats, _ := strings.Cut(a, "=")
		name, _, _ := strings.Cut(label, "/")
		k, err := fetchKernel(name, logf)
		if err != nil {
			return err
		}
		for _, other := range runs {
			if other.label == label {
				return fmt.Errorf("%s is given twice: name each VM of one kernel with its own /SHARD", label)
			}
		}
		r := &kernelRun{kernel: k, label: label, patterns: []string{"./..."}, runs: map[string]string{}, pkgRun: map[string]string{}, counts: map[string]int{}}
		if pats != "" {
			r.patterns = nil
			for _, p := range strings.Split(pats, ",") {
				n := 0
				if i := strings.LastIndex(p, "#"); i >= 0 {
					if n, err = strconv.Atoi(p[i+1:]); err != nil || n < 1 {
						return fmt.Errorf("%s: want #N, a count of runs, at the end", p)
					}
					p = p[:i]
				}
				p, skip, _ := strings.Cut(p, "!")
				p, re, _ := strings.Cut(p, "@")
				r.patterns = append(r.patterns, p)
				if skip != "" {
					re += "!" + skip
				}
				r.runs[p] = re
				if n > 0 {
					r.counts[p] = n
				}
			}
		}
		runs = append(runs, r)
	}
	if fetchOnly {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// One run at a time in a result directory: another vmrun's guests
	// would read this one's binaries and write its results.
	unlock, err := lockDir(out)
	if err != nil {
		return err
	}
	defer unlock()
	start := time.Now()
	binDir := filepath.Join(out, "bin")
	os.RemoveAll(binDir)
	if err := buildTests(runs, binDir); err != nil {
		return err
	}
	env := append(guestEnv(pkgTimeout), "PROBEKIT_TEST_EXPORTER="+exporterPath(binDir))
	sem := make(chan struct{}, max(jobs, 1))
	var wg sync.WaitGroup
	for _, r := range runs {
		r.dir = filepath.Join(out, strings.ReplaceAll(r.label, "/", "-"))
		wg.Add(1)
		sem <- struct{}{} // in the order given
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r.err = r.boot(self, env, pkgTimeout, timeout, mem, verbose)
		}()
	}
	wg.Wait()
	return report(os.Stdout, runs, time.Since(start))
}

// exporterPath is where buildTests puts probekit-export.
func exporterPath(binDir string) string {
	return filepath.Join(binDir, "export", "probekit-export")
}

// guestEnv is the test binaries' environment in the guest: the host's Go
// on PATH (tests run go), the module cache and build cache of the host
// (readable; the build cache is written through /root's overlay), no
// network.
func guestEnv(pkgTimeout time.Duration) []string {
	env := []string{
		"PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "USER=root", "LOGNAME=root", "TMPDIR=/tmp", "LANG=C.UTF-8",
		"PROBEKIT_REQUIRE_KERNEL=1", "GOPROXY=off", "GOTOOLCHAIN=local",
	}
	for _, v := range []string{"GOPATH", "GOMODCACHE", "GOCACHE"} {
		if out, err := exec.Command("go", "env", v).Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
			env = append(env, v+"="+string(bytes.TrimSpace(out)))
		}
	}
	return env
}

// buildTests builds one test binary per package that has tests, once for
// all kernels, in one go test -c (which builds them in parallel and names
// each after the last element of its import path).
func buildTests(runs []*kernelRun, binDir string) error {
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	byImport := map[string]testPkg{}
	byBase := map[string]string{}
	var imports []string
	for _, r := range runs {
		for _, pat := range r.patterns {
			args := []string{"list", "-f", "{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}\t{{.Dir}}{{end}}", pat}
			b, err := run("", "go", args...)
			if err != nil {
				return err
			}
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				imp, dir, ok := strings.Cut(line, "\t")
				if !ok {
					continue
				}
				p, ok := byImport[imp]
				if !ok {
					base := filepath.Base(imp)
					if other, dup := byBase[base]; dup {
						return fmt.Errorf("packages %s and %s have the same test binary name", other, imp)
					}
					byBase[base] = imp
					name := strings.TrimPrefix(imp, "github.com/probekit/probekit")
					name = strings.Trim(strings.ReplaceAll(name, "/", "_"), "_")
					p = testPkg{Import: imp, Dir: dir, Name: name, Binary: filepath.Join(binDir, base+".test")}
					byImport[imp] = p
					imports = append(imports, imp)
				}
				if _, dup := r.pkgRun[imp]; !dup {
					r.pkgRun[imp] = r.runs[pat]
					if n := r.counts[pat]; n > 0 {
						r.counts[imp] = n
					}
					r.pkgs = append(r.pkgs, p)
				}
			}
		}
	}
	start := time.Now()
	cmd := exec.Command("go", append([]string{"test", "-c", "-o", binDir + "/"}, imports...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go test -c: %w", err)
	}
	logf("built %d test binaries in %s (%.0fs)", len(imports), binDir, time.Since(start).Seconds())
	// Tests build the commands (go build) in the guest, where compiling
	// is ten times slower: the host's build cache, which the guest reads
	// and writes through its overlay on /root, gets them first.
	start = time.Now()
	warm := exec.Command("go", "build", "./...")
	warm.Stdout, warm.Stderr = os.Stderr, os.Stderr
	if err := warm.Run(); err != nil {
		return fmt.Errorf("go build ./...: %w", err)
	}
	// cmd/probekit's export tests run probekit-export: built here, as
	// make build builds it (without cgo), where a link takes seconds,
	// not minutes (guestEnv names it to the tests). Not next to the
	// test binaries: probekit export looks for it next to itself first,
	// and TestExportMissing wants it found nowhere.
	if err := os.MkdirAll(filepath.Dir(exporterPath(binDir)), 0o755); err != nil {
		return err
	}
	export := exec.Command("go", "build", "-o", exporterPath(binDir), "./cmd/probekit-export")
	export.Env = append(os.Environ(), "CGO_ENABLED=0")
	export.Stdout, export.Stderr = os.Stderr, os.Stderr
	if err := export.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/probekit-export: %w", err)
	}
	logf("build cache warmed, probekit-export built (%.0fs)", time.Since(start).Seconds())
	return nil
}

func (r *kernelRun) boot(self string, env []string, pkgTimeout, timeout time.Duration, mem int, verbose bool) error {
	os.RemoveAll(r.dir)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	j := job{Kernel: r.kernel.name, Env: env}
	for _, p := range r.pkgs {
		run, skip, _ := strings.Cut(r.runFor(p.Import), "!")
		if run == "" {
			run = runRE
		}
		// -test.short: under emulation the stress and load sizes shrink
		// (usdt's TestAttachDetachCycles runs 200 cycles, not 10,000:
		// over 10 minutes on 5.10), and tests that only parse files
		// (uprobe's build-mode and objdump comparisons, 10 minutes) skip;
		// the host runs them at full size.
		args := []string{"-test.v", "-test.short", "-test.timeout", pkgTimeout.String(), "-test.run", run}
		if skip != "" {
			args = append(args, "-test.skip", skip)
		}
		if n := max(count, r.counts[p.Import]); n > 1 {
			args = append(args, "-test.count", fmt.Sprint(n))
		}
		j.Packages = append(j.Packages, jobPackage{Name: p.Name, Import: p.Import, Dir: p.Dir, Binary: p.Binary, Args: args})
	}
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.dir, "job.json"), b, 0o644); err != nil {
		return err
	}
	initrd := r.dir + ".initrd"
	if err := r.initramfs(self, initrd); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// thread=single: the multi-threaded emulator was seen to corrupt
	// guests under uprobe load.
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64",
		"-accel", "tcg,thread=single", "-cpu", "max", "-smp", "1", "-m", fmt.Sprint(mem),
		"-nodefaults", "-no-reboot", "-display", "none", "-serial", "stdio",
		"-kernel", r.kernel.vmlinuz, "-initrd", initrd,
		"-append", "console=ttyS0 rdinit=/init panic=-1 quiet loglevel=4 mitigations=off"+keepArg(filepath.Join(filepath.Dir(r.dir), "bin")),
		"-fsdev", "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap",
		"-device", "virtio-9p-pci,fsdev=root,mount_tag=root",
		"-fsdev", "local,id=out,path="+r.dir+",security_model=none,multidevs=remap",
		"-device", "virtio-9p-pci,fsdev=out,mount_tag=out",
		"-nic", "none")
	console, err := os.Create(filepath.Join(r.dir, "console.log"))
	if err != nil {
		return err
	}
	defer console.Close()
	var w io.Writer = console
	if verbose {
		w = io.MultiWriter(console, &prefixWriter{w: os.Stderr, prefix: "[" + r.label + "] "})
	}
	cmd.Stdout, cmd.Stderr = w, w
	logf("booting %s (%s), %d packages", r.label, r.kernel.release, len(r.pkgs))
	start := time.Now()
	err = cmd.Run()
	r.wall = time.Since(start)
	logf("%s finished in %s", r.label, r.wall.Round(time.Second))
	r.results = map[string]result{}
	if b, rerr := os.ReadFile(filepath.Join(r.dir, "results.json")); rerr == nil {
		var rs []result
		if json.Unmarshal(b, &rs) == nil {
			for _, x := range rs {
				r.results[x.Name] = x
			}
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("kernel %s: no end after %s (console: %s)", r.label, timeout, console.Name())
	}
	if err != nil {
		return fmt.Errorf("kernel %s: qemu: %w (console: %s)", r.label, err, console.Name())
	}
	return nil
}

// runFor is the -test.run expression for a package, then "!" and its
// -test.skip expression if it has one: the ones given with its pattern,
// else -run's.
func (r *kernelRun) runFor(imp string) string {
	if re := r.pkgRun[imp]; re != "" {
		return re
	}
	return runRE
}

func (r *kernelRun) initramfs(self, path string) error {
	exe, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	mods, err := r.kernel.modules()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	c := &cpioWriter{w: &buf}
	c.Dir("dev")
	c.CharDev("dev/console", 5, 1)
	c.File("init", 0o755, exe)
	c.Dir("modules")
	var order []string
	for i, m := range mods {
		b, err := moduleBytes(m)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%02d-%s.ko", i, modName(m))
		c.File("modules/"+name, 0o644, b)
		order = append(order, name)
	}
	c.File("modules/order", 0o644, []byte(strings.Join(order, "\n")+"\n"))
	if err := c.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

type prefixWriter struct {
	w      io.Writer
	prefix string
	mid    bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if !p.mid {
			io.WriteString(p.w, p.prefix)
		}
		p.w.Write(line)
		p.mid = line[len(line)-1] != '\n'
	}
	return len(b), nil
}

// --- results ---------------------------------------------------------------

var testLineRE = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+)`)

type pkgOutcome struct {
	status           string // ok, FAIL, skip, lost
	pass, fail, skip int
	failed, skipped  []string // test names; skipped with the reason
	// unnamed are the skipped (of skipped) whose reason names no absent
	// kernel feature: in the matrix a test runs, or skips because the
	// kernel lacks what it tests (testkit.SkipOnOldKernel, NeedFeature).
	unnamed []string
}

// namesFeature reports whether a skip's reason names an absent kernel
// feature, as testkit.SkipOnOldKernel words it ("FEATURE needs Linux
// VERSION; running RELEASE").
func namesFeature(reason string) bool {
	return strings.Contains(reason, " needs Linux ")
}

// outcome reads a package's log: top-level tests' results (unindented
// "--- " lines of -test.v) and, for each skip, the reason logged under it.
func outcome(dir string, p testPkg, res result, haveRes bool) pkgOutcome {
	var o pkgOutcome
	f, err := os.Open(filepath.Join(dir, p.Name+".log"))
	if err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		// go test -v prints a test's log (a skip's reason last) before
		// its "--- SKIP" line, indented.
		lastLog := ""
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "    ") && !strings.HasPrefix(strings.TrimSpace(line), "--- ") {
				lastLog = strings.TrimSpace(line)
				if i := strings.Index(lastLog, ": "); i >= 0 && strings.Contains(lastLog[:i], ".go:") {
					lastLog = lastLog[i+2:]
				}
				continue
			}
			m := testLineRE.FindStringSubmatch(line)
			if m == nil {
				if strings.HasPrefix(line, "=== ") {
					lastLog = ""
				}
				continue
			}
			switch m[1] {
			case "PASS":
				o.pass++
			case "FAIL":
				o.fail++
				o.failed = append(o.failed, m[2])
			case "SKIP":
				o.skip++
				o.skipped = append(o.skipped, m[2]+": "+lastLog)
				if !namesFeature(lastLog) {
					o.unnamed = append(o.unnamed, m[2]+": "+lastLog)
				}
			}
			lastLog = ""
		}
		f.Close()
	}
	switch {
	case !haveRes || !res.Finished:
		o.status = "lost"
	case res.Exit != 0 || o.fail > 0:
		o.status = "FAIL"
	case o.pass == 0 && o.skip > 0:
		o.status = "skip"
	default:
		o.status = "ok"
	}
	return o
}

// merge adds b, another shard's outcome of the same package on the same
// kernel, to a.
func (a pkgOutcome) merge(b pkgOutcome) pkgOutcome {
	rank := map[string]int{"skip": 0, "ok": 1, "FAIL": 2, "lost": 3}
	status := a.status
	switch {
	case rank[b.status] > rank[a.status]:
		status = b.status
	case a.status == "skip" || b.status == "skip":
		if a.pass+b.pass > 0 {
			status = "ok"
		}
	}
	return pkgOutcome{
		status: status,
		pass:   a.pass + b.pass, fail: a.fail + b.fail, skip: a.skip + b.skip,
		failed:  append(append([]string(nil), a.failed...), b.failed...),
		skipped: append(append([]string(nil), a.skipped...), b.skipped...),
		unnamed: append(append([]string(nil), a.unnamed...), b.unnamed...),
	}
}

// column is one kernel of the table: the runs (shards) that booted it.
type column struct {
	kernel   *kernelDir
	runs     []*kernelRun
	outcomes map[string]pkgOutcome // import path -> its shards' outcomes merged
}

func report(w io.Writer, runs []*kernelRun, total time.Duration) error {
	var imports []string
	seen := map[string]testPkg{}
	var cols []*column
	byKernel := map[string]*column{}
	for _, r := range runs {
		for _, p := range r.pkgs {
			if _, ok := seen[p.Import]; !ok {
				seen[p.Import] = p
				imports = append(imports, p.Import)
			}
		}
		c := byKernel[r.kernel.name]
		if c == nil {
			c = &column{kernel: r.kernel, outcomes: map[string]pkgOutcome{}}
			byKernel[r.kernel.name] = c
			cols = append(cols, c)
		}
		c.runs = append(c.runs, r)
	}
	sort.Strings(imports)
	rel := func(imp string) string {
		return strings.TrimPrefix(strings.TrimPrefix(imp, "github.com/probekit/probekit"), "/")
	}
	var npass, nfail, nskip int
	bad := false
	// Skips, then failures, shard by shard: the failures print last,
	// just above the totals, where the tail of a long log shows them.
	var skips, failures []string
	leftOut := map[string][]string{} // "package: -skip expression" -> the VMs that left those tests out
	for _, c := range cols {
		for _, r := range c.runs {
			if r.err != nil {
				bad = true
				failures = append(failures, fmt.Sprintf("%s: %v", r.label, r.err))
			}
			byImport := map[string]testPkg{}
			for _, p := range r.pkgs {
				byImport[p.Import] = p
			}
			for _, imp := range imports {
				p, ok := byImport[imp]
				if !ok {
					continue
				}
				res, ok := r.results[p.Name]
				o := outcome(r.dir, p, res, ok)
				if prev, ok := c.outcomes[imp]; ok {
					c.outcomes[imp] = prev.merge(o)
				} else {
					c.outcomes[imp] = o
				}
				npass += o.pass
				nfail += o.fail
				nskip += o.skip
				if o.status == "FAIL" || o.status == "lost" {
					bad = true
				}
				log := filepath.Join(r.dir, p.Name+".log")
				for _, t := range o.failed {
					failures = append(failures, fmt.Sprintf("%s FAIL %s %s (log: %s)", r.label, rel(imp), t, log))
				}
				if o.status == "lost" || (o.status == "FAIL" && len(o.failed) == 0) {
					failures = append(failures, fmt.Sprintf("%s %s %s: exit %d %s (log: %s)", r.label, o.status, rel(imp), res.Exit, res.Error, log))
				}
				for _, sk := range o.skipped {
					skips = append(skips, fmt.Sprintf("%s skip %s %s", r.label, rel(imp), sk))
				}
				for _, sk := range o.unnamed {
					bad = true
					failures = append(failures, fmt.Sprintf("%s SKIP NAMES NO KERNEL FEATURE %s %s (leave it out with !REGEXP, or skip with testkit.SkipOnOldKernel)", r.label, rel(imp), sk))
				}
				if _, skip, _ := strings.Cut(r.runFor(imp), "!"); skip != "" {
					leftOut[rel(imp)+": "+skip] = append(leftOut[rel(imp)+": "+skip], r.label)
				}
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-44s", "package \\ kernel")
	for _, c := range cols {
		fmt.Fprintf(w, " %-22s", c.kernel.name+" ("+c.kernel.release+")")
	}
	fmt.Fprintln(w)
	for _, imp := range imports {
		fmt.Fprintf(w, "%-44s", rel(imp))
		for _, c := range cols {
			o, ok := c.outcomes[imp]
			cell := "-"
			if ok {
				cell = fmt.Sprintf("%s %d", o.status, o.pass)
				if o.fail > 0 {
					cell += fmt.Sprintf(" fail %d", o.fail)
				}
				if o.skip > 0 {
					cell += fmt.Sprintf(" skip %d", o.skip)
				}
			}
			fmt.Fprintf(w, " %-22s", cell)
		}
		fmt.Fprintln(w)
	}
	// A kernel's wall time: each of its VMs' (they ran side by side as -j
	// allowed).
	fmt.Fprintf(w, "%-44s", "wall time (each VM)")
	for _, c := range cols {
		var ts []string
		for _, r := range c.runs {
			ts = append(ts, r.wall.Round(time.Second).String())
		}
		fmt.Fprintf(w, " %-22s", strings.Join(ts, " + "))
	}
	fmt.Fprintln(w)
	for _, d := range skips {
		fmt.Fprintln(w, d)
	}
	if len(leftOut) > 0 {
		fmt.Fprintln(w, "\nnot run in these VMs (go test -skip; the host runs them):")
		var keys []string
		for k := range leftOut {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s (%s)\n", k, strings.Join(leftOut[k], ", "))
		}
	}
	if len(failures) > 0 {
		fmt.Fprintln(w, "\nfailures:")
		for _, d := range failures {
			fmt.Fprintln(w, d)
		}
	}
	fmt.Fprintf(w, "\nkernel matrix: %s in all (build and every kernel)\n", total.Round(time.Second))
	fmt.Fprintf(w, "kernels: %d passed, %d failed, %d skipped\n", npass, nfail, nskip)
	if bad {
		return fmt.Errorf("failures on the kernel matrix")
	}
	return nil
}

// keepArg names on the guest's command line the checkout and binDir, the
// test binaries' directory, when they lie under /tmp or /run, which the
// guest mounts its own tmpfs on, or /root or /var, which it overlays
// (guest.go).
func keepArg(binDir string) string {
	var hiddenDirs []string
	keep := func(dir string, hidden ...string) {
		for _, h := range hidden {
			if strings.HasPrefix(dir+"/", h) && !strings.ContainsAny(dir, " \t\n,") {
				hiddenDirs = append(hiddenDirs, dir)
				return
			}
		}
	}
	// The checkout too: under /root or /var the overlay would give its
	// files another device than the one /proc/PID/maps names (every
	// kernel test of a fixture failed "not the mapped file" from a
	// checkout under /var/tmp); kept, it is read-only, as under /tmp.
	if out, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		keep(filepath.Dir(strings.TrimSpace(string(out))), "/tmp/", "/run/", "/root/", "/var/")
	}
	keep(binDir, "/tmp/", "/run/", "/root/", "/var/")
	if len(hiddenDirs) == 0 {
		return ""
	}
	return " vmrun.keep=" + strings.Join(hiddenDirs, ",")
}
