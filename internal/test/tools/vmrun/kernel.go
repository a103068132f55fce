package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// kernels names the Debian suite whose linux-image-amd64 gives each
// kernel of the matrix.
var kernels = map[string]string{
	"5.10": "bullseye",
	"6.1":  "bookworm",
	"6.12": "trixie",
}

// debianMirror is the archive the kernels come from.
const debianMirror = "http://deb.debian.org/debian"

// guestModules are the modules the guest needs for its root and its
// result share (9p over virtio) and the writable /var and /root
// (overlay), loaded with their dependencies when they are not built in.
var guestModules = []string{"virtio_pci", "9pnet_virtio", "9p", "overlay"}

// kernelDir is an unpacked kernel package.
type kernelDir struct {
	name    string // "5.10"
	release string // "5.10.0-32-amd64"
	dir     string // where the .deb is unpacked
	vmlinuz string
}

func cacheRoot() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "probekit", "kernels"), nil
}

func run(dir string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}

// aptOptions is a private apt configuration under root: its own sources,
// lists and cache, so the system's apt state is neither read nor changed.
func aptOptions(root string) ([]string, error) {
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	var src strings.Builder
	suites := make([]string, 0, len(kernels))
	for _, s := range kernels {
		suites = append(suites, s)
	}
	sort.Strings(suites)
	for _, s := range suites {
		fmt.Fprintf(&src, "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n", debianMirror, s)
	}
	list := filepath.Join(root, "sources.list")
	if err := os.WriteFile(list, []byte(src.String()), 0o644); err != nil {
		return nil, err
	}
	return []string{
		"-o", "Dir::Etc::sourcelist=" + list,
		"-o", "Dir::Etc::sourceparts=/dev/null",
		"-o", "Dir::State::Lists=" + filepath.Join(root, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(root, "cache"),
		"-o", "APT::Sandbox::User=root",
		"-o", "Debug::NoLocking=1",
		"-o", "Acquire::Languages=none",
		"-q",
	}, nil
}

var dependsRE = regexp.MustCompile(`(?m)^Depends:.*?\b(linux-image-[0-9][^ ,]*-amd64)\b`)

// fetchKernel returns the kernel name ("5.10"), downloading and unpacking
// its Debian package under the cache directory the first time.
func fetchKernel(name string, logf func(string, ...any)) (*kernelDir, error) {
	suite, ok := kernels[name]
	if !ok {
		return nil, fmt.Errorf("unknown kernel %q (known: 5.10, 6.1, 6.12)", name)
	}
	root, err := cacheRoot()
	if err != nil {
		return nil, err
	}
	kdir := filepath.Join(root, name)
	if k, err := loadKernel(name, kdir); err == nil {
		return k, nil
	}
	// One fetch at a time in the cache, across processes (another vmrun
	// fetching into the same apt directory) and goroutines (-j).
	unlock, err := lockDir(root)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if k, err := loadKernel(name, kdir); err == nil {
		return k, nil // fetched while this one waited
	}
	logf("fetching the %s kernel (Debian %s) into %s", name, suite, kdir)
	aptRoot := filepath.Join(root, "apt")
	opts, err := aptOptions(aptRoot)
	if err != nil {
		return nil, err
	}
	if _, err := run("", "apt-get", append(opts, "update")...); err != nil {
		return nil, err
	}
	// The metapackage's versions differ by suite; the one whose policy
	// line names the suite gives the image package it depends on.
	pol, err := run("", "apt-cache", append(opts, "policy", "linux-image-amd64")...)
	if err != nil {
		return nil, err
	}
	version := ""
	sc := bufio.NewScanner(bytes.NewReader(pol))
	last := ""
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] != "Installed:" && f[0] != "Candidate:" {
			last = f[0]
		}
		if last != "" && strings.Contains(sc.Text(), " "+suite+"/main ") {
			version = strings.TrimPrefix(last, "*** ")
			break
		}
	}
	if version == "" {
		return nil, fmt.Errorf("no linux-image-amd64 in Debian %s:\n%s", suite, pol)
	}
	show, err := run("", "apt-cache", append(opts, "show", "linux-image-amd64="+version)...)
	if err != nil {
		return nil, err
	}
	m := dependsRE.FindSubmatch(show)
	if m == nil {
		return nil, fmt.Errorf("linux-image-amd64=%s depends on no kernel image:\n%s", version, show)
	}
	pkg := string(m[1])
	tmp := kdir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	if _, err := run(tmp, "apt-get", append(opts, "download", pkg)...); err != nil {
		return nil, err
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, pkg+"_*.deb"))
	if len(debs) != 1 {
		return nil, fmt.Errorf("apt-get download %s left %d packages", pkg, len(debs))
	}
	if _, err := run("", "dpkg-deb", "-x", debs[0], filepath.Join(tmp, "root")); err != nil {
		return nil, err
	}
	release := strings.TrimPrefix(pkg, "linux-image-")
	// trixie's package puts the modules under usr/lib (merged /usr);
	// depmod -b looks under lib.
	unpacked := filepath.Join(tmp, "root")
	if _, err := os.Stat(filepath.Join(unpacked, "lib")); os.IsNotExist(err) {
		if err := os.Symlink("usr/lib", filepath.Join(unpacked, "lib")); err != nil {
			return nil, err
		}
	}
	// The package ships no modules.dep: depmod writes it.
	if _, err := run("", "depmod", "-b", filepath.Join(tmp, "root"), release); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "release"), []byte(release+"\n"), 0o644); err != nil {
		return nil, err
	}
	os.Remove(debs[0])
	os.RemoveAll(kdir)
	if err := os.Rename(tmp, kdir); err != nil {
		return nil, err
	}
	return loadKernel(name, kdir)
}

// lockDir creates dir and takes an exclusive flock on its lock file,
// waiting for another holder; the returned function releases it.
func lockDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

func loadKernel(name, kdir string) (*kernelDir, error) {
	b, err := os.ReadFile(filepath.Join(kdir, "release"))
	if err != nil {
		return nil, err
	}
	release := strings.TrimSpace(string(b))
	k := &kernelDir{name: name, release: release, dir: filepath.Join(kdir, "root"),
		vmlinuz: filepath.Join(kdir, "root", "boot", "vmlinuz-"+release)}
	if _, err := os.Stat(k.vmlinuz); err != nil {
		return nil, err
	}
	return k, nil
}

// modules returns the guest's modules in load order (dependencies
// first), as paths of the unpacked package; a module that modules.dep
// does not list but modules.builtin does is built in and skipped.
func (k *kernelDir) modules() ([]string, error) {
	mdir := filepath.Join(k.dir, "lib", "modules", k.release)
	dep, err := os.ReadFile(filepath.Join(mdir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	builtin, _ := os.ReadFile(filepath.Join(mdir, "modules.builtin"))
	deps := map[string][]string{} // module path -> dependency paths
	byName := map[string]string{} // "9pnet_virtio" -> module path
	for _, line := range strings.Split(string(dep), "\n") {
		mod, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
		byName[modName(mod)] = mod
	}
	isBuiltin := map[string]bool{}
	for _, line := range strings.Split(string(builtin), "\n") {
		if line != "" {
			isBuiltin[modName(line)] = true
		}
	}
	var order []string
	seen := map[string]bool{}
	var visit func(string)
	visit = func(mod string) {
		if seen[mod] {
			return
		}
		seen[mod] = true
		for _, d := range deps[mod] {
			visit(d)
		}
		order = append(order, filepath.Join(mdir, mod))
	}
	for _, n := range guestModules {
		mod, ok := byName[n]
		if !ok {
			if isBuiltin[n] {
				continue
			}
			return nil, fmt.Errorf("kernel %s: module %s neither in modules.dep nor built in", k.release, n)
		}
		visit(mod)
	}
	return order, nil
}

// modName is a module's name from its path: "kernel/net/9p/9pnet_virtio.ko.xz"
// gives "9pnet_virtio"; the kernel treats '-' and '_' alike.
func modName(path string) string {
	b := filepath.Base(path)
	if i := strings.Index(b, ".ko"); i >= 0 {
		b = b[:i]
	}
	return strings.ReplaceAll(b, "-", "_")
}

// moduleBytes reads a module, decompressed (the guest loads it with
// finit_module and no decompression flag).
func moduleBytes(path string) ([]byte, error) {
	switch {
	case strings.HasSuffix(path, ".ko"):
		return os.ReadFile(path)
	case strings.HasSuffix(path, ".ko.xz"):
		return run("", "xz", "-dc", path)
	case strings.HasSuffix(path, ".ko.zst"):
		return run("", "zstd", "-dc", path)
	case strings.HasSuffix(path, ".ko.gz"):
		return run("", "gzip", "-dc", path)
	}
	return nil, errors.New("unknown module compression: " + path)
}
