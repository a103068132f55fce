package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/interp"
	"github.com/probekit/probekit/usdt/bpf"
)

// KeyKind is what a key part of a keyed count or histogram is (enum
// key_kind of trace.c).
type KeyKind uint8

const (
	// KeyArg is a value (argument N, or a return value) as a number.
	KeyArg KeyKind = 1
	// KeyStr is a value read as a pointer to a NUL-terminated string, of
	// at most KeyStrLen-1 bytes.
	KeyStr KeyKind = 2
	// KeyPID and KeyTID are the process and thread ids (initial PID
	// namespace).
	KeyPID KeyKind = 3
	KeyTID KeyKind = 4
	// KeyComm is the thread's command name (at most 15 bytes).
	KeyComm KeyKind = 5
	// KeyProbe is the probe index (the cookie an event would carry).
	KeyProbe KeyKind = 6
	// KeyStack is the thread's user stack, walked by the kernel by frame
	// pointers (bpf_get_stackid), with the process whose addresses they
	// are: Key.Stack, Key.StackPID, read back with Objects.Stack. At a
	// function's entry (a uprobe, not a USDT site or a return) the
	// caller is part of the key, as stack.bpf.h's
	// probekit_count_user_stack keeps it.
	KeyStack KeyKind = 7
	// KeyStackCFI is the thread's user stack unwound inside BPF from the
	// objects' call-frame information (unwind.bpf.h), which frame
	// pointers do not limit: Key.Nums of the part is its id (negative:
	// the walk's error), Key.StackPID its process; Objects.Stack reads
	// it back. The program then walks with the tables of a
	// bpfunwind.Tables: call its Prepare on the spec and load with its
	// Replacements (LoadSpecOptions), and Add each traced process.
	KeyStackCFI KeyKind = 8
)

// MaxStacks is how many distinct stacks a KeyStack part keeps (the
// stack map's size, preallocated at about 1 KiB each); a hit whose new
// stack finds it full is counted under Key.Stack < 0.
const MaxStacks = 10240

// StackMapName is the stack map of KeyStack (a BPF_MAP_TYPE_STACK_TRACE);
// CFIStackMapName KeyStackCFI's (a hash of struct probekit_cfi_stack by
// id, bpfunwind.DecodeStack reads its values); KeyCFIName the constant
// that turns the walk on.
const (
	StackMapName    = "stack_traces"
	CFIStackMapName = "cfi_stacks"
	KeyCFIName      = "probekit_trace_key_cfi"
)

// MaxKeys is the most parts of a key, of which at most one is a KeyStr;
// KeyStrLen the bytes read for it, its NUL included (TRACE_MAX_KEYS,
// TRACE_KEY_STR_LEN in trace.c). MaxKeyed is how many keys the map holds.
const (
	MaxKeys   = 4
	KeyStrLen = 64
	MaxKeyed  = 10240
)

// KeyPart is one part of a key: its kind and, for KeyArg and KeyStr, the
// value's number (0-based).
type KeyPart struct {
	Kind KeyKind
	Val  int
}

// SetKeys makes spec's ModeCount or ModeHist programs count per key
// tuple (parts, in order) in KeyedMap instead of per probe.
func SetKeys(spec *ebpf.CollectionSpec, parts []KeyPart) error {
	if len(parts) > MaxKeys {
		return fmt.Errorf("record: %d key parts, at most %d", len(parts), MaxKeys)
	}
	var v uint64
	strs, size := 0, keyCommOff
	cfi := false
	for i, p := range parts {
		if p.Kind < KeyArg || p.Kind > KeyStackCFI || p.Val < 0 || p.Val >= MaxArgs {
			return fmt.Errorf("record: key part %d: kind %d, value %d", i, p.Kind, p.Val)
		}
		if p.Kind == KeyStr {
			if strs++; strs > 1 {
				return errors.New("record: at most one string key part")
			}
		}
		v |= uint64(p.Kind)<<4<<(8*i) | uint64(p.Val)<<(8*i)
		end := keyNumsOff + 8*(i+1)
		switch p.Kind {
		case KeyComm:
			end = keyNumsOff
		case KeyProbe:
			end = keyCommOff
		case KeyStr:
			end = keyStackOff
		case KeyStack:
			end = aggKeySize
			spec.Maps[StackMapName].MaxEntries = MaxStacks
		case KeyStackCFI:
			// nums[i], then stack_pid after stack.
			end = keyStackOff + 8
			spec.Maps[CFIStackMapName].MaxEntries = MaxStacks
			cfi = true
		}
		size = max(size, end)
	}
	on := uint32(0)
	if cfi {
		on = 1
	}
	if err := spec.Variables[KeyCFIName].Set(on); err != nil {
		return fmt.Errorf("set %s: %w", KeyCFIName, err)
	}
	if err := spec.Variables[KeySpecName].Set(v); err != nil {
		return fmt.Errorf("set %s: %w", KeySpecName, err)
	}
	// The key is the bytes of agg_key up to the last field used (see
	// trace.c); its size is no BTF type's.
	m := spec.Maps["keyed"]
	m.KeySize, m.Key, m.Value = uint32(size), nil, nil
	return nil
}

// aggKey is struct agg_key of trace.c, which has no padding: its fields
// back to back (encoding/binary's layout) are its bytes.
type aggKey struct {
	Probe, Bucket uint32
	Comm          [16]byte
	Nums          [MaxKeys]int64
	Str           [KeyStrLen]byte
	Stack         int32
	StackPID      uint32
	Caller        uint64
}

// Offsets in agg_key of the fields after probe and bucket.
const (
	keyCommOff  = 8
	keyNumsOff  = keyCommOff + 16
	keyStrOff   = keyNumsOff + 8*MaxKeys
	keyStackOff = keyStrOff + KeyStrLen
	aggKeySize  = keyStackOff + 16
)

// UnmarshalBinary decodes a key of KeyedMap: the first bytes of an
// agg_key, the rest 0.
func (k *aggKey) UnmarshalBinary(b []byte) error {
	if len(b) > aggKeySize {
		return fmt.Errorf("record: keyed map key of %d bytes, at most %d", len(b), aggKeySize)
	}
	var full [aggKeySize]byte
	copy(full[:], b)
	_, err := binary.Decode(full[:], binary.NativeEndian, k)
	return err
}

// Key is one key tuple of a keyed count or histogram: the fields its
// parts fill (KeyPart n's number is Nums[n]; Probe is 0 without a
// KeyProbe part). With a KeyStack part, Stack is the stack's id for
// Objects.Stack (negative: bpf_get_stackid's error, -EFAULT for a stack
// it could not read, -ENOMEM or -EEXIST for a full map), StackPID its
// process and Caller the caller of a function entry (0 elsewhere).
type Key struct {
	Probe    uint32
	Nums     [MaxKeys]int64
	Comm     string
	Str      string
	Stack    int32
	StackPID uint32
	Caller   uint64
}

// KeyedEntry is a key's hits (a count: Bucket 0) or its hits in one
// bucket of its histogram.
type KeyedEntry struct {
	Key    Key
	Bucket int
	Count  uint64
}

// Keyed returns the entries of KeyedMap, in the map's order.
func (o *Objects) Keyed() ([]KeyedEntry, error) {
	var out []KeyedEntry
	var k aggKey
	var c uint64
	it := o.KeyedMap.Iterate()
	for it.Next(&k, &c) {
		if k.Bucket >= NumBuckets {
			return nil, fmt.Errorf("record: keyed entry of bucket %d, want below %d", k.Bucket, NumBuckets)
		}
		e := KeyedEntry{Key: Key{Probe: k.Probe, Nums: k.Nums, Comm: cString(k.Comm[:]), Str: cString(k.Str[:]),
			Stack: k.Stack, StackPID: k.StackPID, Caller: k.Caller}, Bucket: int(k.Bucket), Count: c}
		out = append(out, e)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the keyed counts: %w", err)
	}
	return out, nil
}

// Stack returns the user stack of a KeyStack key, innermost first (as
// bpf.Stack): the kernel's walk, with the caller of a function entry put
// back in second place; or of a KeyStackCFI key, the CFI walk.
func (o *Objects) Stack(k Key) (bpf.Stack, error) {
	s, _, err := o.StackWalk(k)
	return s, err
}

// StackWalk is Stack with why a KeyStackCFI part's walk ended (0 for a
// KeyStack part: the kernel's frame-pointer walk says not).
func (o *Objects) StackWalk(k Key) (bpf.Stack, bpfunwind.Stop, error) {
	w, err := o.Walked(k)
	return w.Native, w.Stop, err
}

// WalkedStack is a counted stack as the walk read it.
type WalkedStack struct {
	// Native are the native frames, innermost first (bpf.Stack), and
	// Stop why a KeyStackCFI part's walk ended.
	Native bpf.Stack
	Stop   bpfunwind.Stop
	// Interp are a KeyStackCFI stack's interpreter frames, innermost
	// first (see Event.Interp), and InterpStop why their walk ended
	// (0 without it). A stack's id covers both parts: hits with the same
	// native frames in different interpreted functions count apart.
	Interp     []interp.Raw
	InterpStop uint8
}

// Walked returns the counted stack of a stack key: Stack's frames, and
// a KeyStackCFI part's walk end and interpreter frames.
func (o *Objects) Walked(k Key) (WalkedStack, error) {
	if o.cfiPart > 0 {
		return o.cfiStack(k.Nums[o.cfiPart-1])
	}
	if k.Stack < 0 {
		return WalkedStack{}, fmt.Errorf("record: no stack: bpf_get_stackid failed with errno %d", -k.Stack)
	}
	s, err := bpf.LookupStack(o.StackMap, k.Stack, k.Caller)
	return WalkedStack{Native: s}, err
}

// StackID returns the id of a KeyStackCFI key's stack (negative: the
// walk's error), false without such a part.
func (o *Objects) StackID(k Key) (int64, bool) {
	if o.cfiPart == 0 {
		return 0, false
	}
	return k.Nums[o.cfiPart-1], true
}

// cfiStack reads stack id of CFIStackMap.
func (o *Objects) cfiStack(id int64) (WalkedStack, error) {
	if id < 0 {
		return WalkedStack{}, fmt.Errorf("record: no stack: the CFI walk failed with errno %d", -id)
	}
	raw := make([]byte, o.CFIStackMap.ValueSize())
	if err := o.CFIStackMap.Lookup(uint64(id), raw); err != nil {
		return WalkedStack{}, fmt.Errorf("record: stack %#x: %w", id, err)
	}
	return decodeWalked(raw)
}

// decodeWalked reads trace.c's struct trace_stack (host byte order):
// struct probekit_cfi_stack, then struct probekit_interp_stack.
func decodeWalked(raw []byte) (WalkedStack, error) {
	var w WalkedStack
	var err error
	if w.Native, w.Stop, err = bpfunwind.DecodeStack(raw); err != nil {
		return w, err
	}
	if len(raw) < bpfunwind.StackRecordSize+8 {
		return w, nil // a stack without the interpreter part
	}
	part := raw[bpfunwind.StackRecordSize:]
	n := binary.NativeEndian.Uint32(part)
	w.InterpStop = uint8(binary.NativeEndian.Uint32(part[4:]))
	if n > MaxInterpFrames || uint64(n) > uint64(len(part)-8)/InterpFrameSize {
		return w, fmt.Errorf("record: %d interpreter frames in a stack of %d bytes", n, len(raw))
	}
	w.Interp = make([]interp.Raw, n)
	decodeInterp(w.Interp, part[8:])
	return w, nil
}

// cfiKeyPart returns the index + 1 of spec's KeyStackCFI key part, 0
// when it has none.
func cfiKeyPart(spec *ebpf.CollectionSpec) (int, error) {
	var v uint64
	if err := spec.Variables[KeySpecName].Get(&v); err != nil {
		return 0, fmt.Errorf("read %s: %w", KeySpecName, err)
	}
	for i := range MaxKeys {
		if KeyKind(v>>(8*i+4)&0xf) == KeyStackCFI {
			return i + 1, nil
		}
	}
	return 0, nil
}

// KeyOverflowCount returns how many hits were not counted because
// KeyedMap was full.
func (o *Objects) KeyOverflowCount() (uint64, error) {
	var n uint64
	if err := o.KeyOverflow.Lookup(uint32(0), &n); err != nil {
		return 0, fmt.Errorf("read the key overflow counter: %w", err)
	}
	return n, nil
}

// cString is b up to its first NUL.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
