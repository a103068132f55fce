package usdt

// Arguments at one place at every site: usdt.bpf.h's
// __probekit_usdt_same (PROBEKIT_USDT_SAME_ARGS), set before load, which
// lets a program read such an argument without the site's spec.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// SameArgsName is the constant usdt.bpf.h defines under
// PROBEKIT_USDT_SAME_ARGS.
const SameArgsName = "__probekit_usdt_same"

// ErrNotSameArgs indicates a site whose arguments are not where the
// program was built to read them (SetSameArgs): the file changed since,
// or the attach names other sites than SetSameArgs was given.
var ErrNotSameArgs = errors.New("argument not where the program reads it (SetSameArgs)")

// ProbeRef names a probe as Attach takes it.
type ProbeRef struct {
	Target, Provider, Name string
}

// SetSameArgs finds, before spec is loaded, the sites Attach will attach
// to for each of probes (resolved as Attach resolves them, with opts'
// process), and writes to spec's __probekit_usdt_same (SameArgsName)
// which arguments every one of them has in one register or as one
// constant, and where. A program built with PROBEKIT_USDT_SAME_ARGS then
// reads those with __probekit_usdt_same_arg: the verifier knows the
// location, and a hit reads one register, with no spec lookup and no
// helper call. It returns the arguments set, a bit each, and how many
// sites it found.
//
// The table is a constant of the program: an Attacher of the collection
// loaded from spec (NewAttacher, NewAttacherWithMaps) refuses, with
// ErrNotSameArgs, any site that has such an argument elsewhere. Use it
// when the sites are known before load (no glob target, no following);
// without it every argument is read from its site's spec.
func SetSameArgs(spec *ebpf.CollectionSpec, probes []ProbeRef, opts *Options) (mask uint32, sites int, err error) {
	v, layout, err := sameTable(spec)
	if err != nil {
		return 0, 0, err
	}
	if opts == nil {
		opts = &Options{}
	}
	proc, err := openProcess(opts)
	if err != nil {
		return 0, 0, err
	}
	a := &Attacher{layout: layout, cache: NewCache()}
	var specs []bpfSpec
	for _, r := range probes {
		objs, err := a.objects(proc, r.Target, r.Provider, r.Name)
		if err != nil {
			return 0, 0, err
		}
		for oi := range objs {
			o := &objs[oi]
			sym := symbolsFor(o)
			for _, p := range o.probes {
				for li := range p.Locations {
					loc := &p.Locations[li]
					s, _ := layout.siteSpec(o, loc, sym, 0)
					specs = append(specs, s)
				}
			}
		}
		closeObjects(objs)
	}
	mask, args := sameOf(specs)
	enc, err := layout.encode(&bpfSpec{Args: args[:]})
	if err != nil {
		return 0, 0, fmt.Errorf("usdt: %s: %w", SameArgsName, err)
	}
	b := binary.NativeEndian.AppendUint32(make([]byte, 0, 8+len(enc)), mask)
	b = append(b, 0, 0, 0, 0)
	if err := v.Set(append(b, enc...)); err != nil {
		return 0, 0, fmt.Errorf("usdt: set %s: %w", SameArgsName, err)
	}
	return mask, len(specs), nil
}

// Place is where an argument is at every site a program attaches to,
// as SetSameArgs found it: a constant, or a register read whole and then
// cut to Size bytes and extended as bpf_usdt_arg does.
type Place struct {
	Const bool
	// Value is the constant, extended from Size bytes (Const).
	Value int64
	// RegOff is the byte offset of the register in the kernel's pt_regs
	// (not Const).
	RegOff int
	// Size is the argument's size in bytes: 1, 2, 4 or 8.
	Size   int
	Signed bool
}

// SameArgsOf reads what SetSameArgs wrote into spec: the place of each
// argument (0-based) that every site has in one register or as one
// constant. It is empty for a spec SetSameArgs did not set, and an error
// for one without the table (PROBEKIT_USDT_SAME_ARGS).
func SameArgsOf(spec *ebpf.CollectionSpec) (map[int]Place, error) {
	v, layout, err := sameTable(spec)
	if err != nil {
		return nil, err
	}
	b := v.Value
	if len(b) != layout.sameArgsSize() {
		return nil, fmt.Errorf("usdt: %s holds %d bytes, want %d", SameArgsName, len(b), layout.sameArgsSize())
	}
	mask := binary.NativeEndian.Uint32(b)
	places := map[int]Place{}
	for n := range min(maxSpecArgs, layout.argCap) {
		if mask&(1<<n) == 0 {
			continue
		}
		a := layout.decodeArg(b[8:], n)
		if a.BitShift%8 != 0 || a.BitShift > 56 || a.Type != argConst && a.Type != argReg {
			continue
		}
		p := Place{Size: 8 - int(a.BitShift)/8, Signed: a.Signed}
		if a.Type == argConst {
			// As the BPF side extends a value: keep Size bytes.
			p.Const = true
			v := a.ValOff << a.BitShift
			if a.Signed {
				p.Value = int64(v) >> a.BitShift
			} else {
				p.Value = int64(v >> a.BitShift)
			}
		} else {
			p.RegOff = int(a.RegOff)
		}
		places[n] = p
	}
	return places, nil
}

// sameTable returns spec's __probekit_usdt_same and the layout of its
// spec, checked against each other.
func sameTable(spec *ebpf.CollectionSpec) (*ebpf.VariableSpec, *specLayout, error) {
	v, ok := spec.Variables[SameArgsName]
	if !ok {
		return nil, nil, fmt.Errorf("usdt: no %s (define PROBEKIT_USDT_SAME_ARGS before including usdt.bpf.h)", SameArgsName)
	}
	ms, ok := spec.Maps[specsMapName]
	if !ok {
		return nil, nil, ErrNoSpecsMap
	}
	layout, err := newSpecLayout(ms.Value)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", specsMapName, err)
	}
	if want := layout.sameArgsSize(); int(v.Size()) != want {
		return nil, nil, fmt.Errorf("usdt: %s is %d bytes, want %d (a mask, padding and a spec)", SameArgsName, v.Size(), want)
	}
	return v, layout, nil
}

// sameOf returns which arguments every one of specs has in one register
// or as one constant (a bit each), and where: the first spec's.
func sameOf(specs []bpfSpec) (mask uint32, args [maxSpecArgs]bpfArg) {
	if len(specs) == 0 {
		return 0, args
	}
	for n, a := range specs[0].Args {
		if n < maxSpecArgs && (a.Type == argReg || a.Type == argConst) {
			args[n] = a
			mask |= 1 << n
		}
	}
	for _, s := range specs[1:] {
		for n := range maxSpecArgs {
			if mask&(1<<n) != 0 && (n >= len(s.Args) || s.Args[n] != args[n]) {
				mask &^= 1 << n
			}
		}
	}
	return mask, args
}

// sameArgsSize is the size of struct __probekit_usdt_same_args: a mask,
// padding and a spec.
func (l *specLayout) sameArgsSize() int { return 8 + l.size() }

// sameArgs is what an Attacher checks sites against: the table of the
// collection's program (its arguments' records as encoded).
type sameArgs struct {
	mask uint32
	spec []byte // an encoded spec holding the arguments of mask
}

// readSameArgs reads spec's table, if it has one.
func (a *Attacher) readSameArgs(spec *ebpf.CollectionSpec) error {
	v, ok := spec.Variables[SameArgsName]
	if !ok {
		return nil
	}
	b := bytes.Clone(v.Value)
	if len(b) != a.layout.sameArgsSize() {
		return fmt.Errorf("usdt: %s is %d bytes, want %d", SameArgsName, len(b), a.layout.sameArgsSize())
	}
	a.same = sameArgs{mask: binary.NativeEndian.Uint32(b), spec: b[8:]}
	return nil
}

// checkSame refuses a site (s, encoded as enc) that has an argument of
// the table elsewhere than the table says, or not at all.
func (a *Attacher) checkSame(s *bpfSpec, enc []byte) error {
	l := a.layout
	for n := range min(maxSpecArgs, l.argCap) {
		if a.same.mask&(1<<n) == 0 {
			continue
		}
		lo := int(l.argsOff) + n*int(l.argStride)
		hi := lo + int(l.argStride)
		if n >= len(s.Args) || !bytes.Equal(enc[lo:hi], a.same.spec[lo:hi]) {
			return fmt.Errorf("argument %d: %w", n+1, ErrNotSameArgs)
		}
	}
	return nil
}
