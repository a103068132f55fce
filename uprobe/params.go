package uprobe

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/procmaps"
)

// ErrNoDWARF is returned by Params for a binary whose DWARF (its own or
// its debug file's) cannot be found.
var ErrNoDWARF = errors.New("no DWARF debug information")

// Params returns fn's signature from DWARF: its parameters by name and
// type, each with where it is at fn's entry (a register by its DWARF
// number, see debuginfo.RegisterName, or a stack slot from the CFA), and
// its results. The DWARF is the binary's own or, for a stripped binary,
// its debug file's, found as DebugFile's is (locally only: inside the
// process's root first for OpenProcess, then on the host), with the
// supplementary file its DWARF names when dwz made one
// (debuginfo.OpenSup, found the same way); it is read on
// the first call and kept. The error wraps ErrNoDWARF when there is none
// and debuginfo.ErrNoFunction when the DWARF does not describe fn.
//
// Params needs the open file the first time: after Close it fails unless
// an earlier call read the DWARF.
func (b *Binary) Params(fn Function) (*debuginfo.Signature, error) {
	if b.signatures == nil {
		return nil, fmt.Errorf("uprobe: %s: %w", b.display, ErrNoDWARF)
	}
	s, err := b.signatures()
	if err != nil {
		return nil, err
	}
	sig, err := s.At(fn.Address)
	if err != nil {
		return nil, fmt.Errorf("uprobe: %s: %s: %w", b.display, fn.Name, err)
	}
	return sig, nil
}

// loadSignatures opens the DWARF of the binary: its own, or its debug
// file's.
func (b *Binary) loadSignatures() (*debuginfo.Signatures, error) {
	if b.closed.Load() || b.target == nil {
		return nil, fmt.Errorf("uprobe: %s: %w (the binary is closed)", b.display, ErrNoDWARF)
	}
	opts := &debuginfo.Options{Process: b.proc, Offline: true}
	d, err := debuginfo.Find(b.target.File, b.target.Path, opts)
	if err != nil {
		return nil, fmt.Errorf("uprobe: %s: %w: %w", b.display, ErrNoDWARF, err)
	}
	defer d.Close()
	key, keyed := sigKeyOf(d.File)
	if keyed {
		if s := cachedSignatures(key); s != nil {
			return s, nil
		}
	}
	ef, err := safeelf.NewFile(d)
	if err != nil {
		return nil, fmt.Errorf("uprobe: %s: debug file %s: %w", b.display, d.Path, err)
	}
	// dwz's common file, found as the debug file was: without it the
	// names and types kept there are unknown, the rest still reads.
	sup, _ := debuginfo.OpenSup(d, ef, opts)
	s, err := debuginfo.OpenSignaturesELFWith(ef, &debuginfo.SignaturesOptions{Sup: sup})
	if errors.Is(err, debuginfo.ErrNoLines) {
		return nil, fmt.Errorf("uprobe: %s: %w", b.display, ErrNoDWARF)
	}
	if err != nil {
		return nil, fmt.Errorf("uprobe: %s: DWARF of %s: %w", b.display, d.Path, err)
	}
	if keyed {
		cacheSignatures(key, s)
	}
	return s, nil
}

// The DWARF of the debug files read last, shared by the Binaries of one
// process: every trace of libc's functions would read libc6-dbg's 10 MB
// of sections again (0.5 s each; Signatures are safe for concurrent
// use). A file is known by its identity, size and modification time,
// so a file rewritten in place is read again.
var sigCache struct {
	sync.Mutex
	entries []sigEntry // least recent first
}

// maxCachedSignatures bounds the files kept: libc's DWARF takes about
// 45 MB in memory.
const maxCachedSignatures = 2

type sigKey struct {
	id          procmaps.FileID
	size, mtime int64
}

type sigEntry struct {
	key sigKey
	s   *debuginfo.Signatures
}

func sigKeyOf(f *os.File) (sigKey, bool) {
	var st unix.Stat_t
	if f == nil || unix.Fstat(int(f.Fd()), &st) != nil {
		return sigKey{}, false
	}
	return sigKey{procmaps.FileID{Dev: st.Dev, Inode: st.Ino}, st.Size, st.Mtim.Nano()}, true
}

func cachedSignatures(k sigKey) *debuginfo.Signatures {
	sigCache.Lock()
	defer sigCache.Unlock()
	for i, e := range sigCache.entries {
		if e.key == k {
			sigCache.entries = append(append(sigCache.entries[:i:i], sigCache.entries[i+1:]...), e)
			return e.s
		}
	}
	return nil
}

func cacheSignatures(k sigKey, s *debuginfo.Signatures) {
	sigCache.Lock()
	defer sigCache.Unlock()
	if len(sigCache.entries) >= maxCachedSignatures {
		sigCache.entries = sigCache.entries[1:]
	}
	sigCache.entries = append(sigCache.entries, sigEntry{k, s})
}
