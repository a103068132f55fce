package record

import (
	"encoding/binary"
	"testing"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/interp"
)

// aggKey is struct agg_key: the map's key size is its size.
func TestAggKeyLayout(t *testing.T) {
	spec, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	m := spec.Maps["keyed"]
	if m == nil || int(m.KeySize) != binary.Size(aggKey{}) || m.MaxEntries != MaxKeyed {
		t.Fatalf("keyed map %+v, want key size %d and %d entries", m, binary.Size(aggKey{}), MaxKeyed)
	}
	if m.KeySize != 136 || aggKeySize != 136 {
		t.Errorf("key size %d (aggKeySize %d), want 136", m.KeySize, aggKeySize)
	}
}

// filterTerm is struct filter_term.
func TestFilterTermLayout(t *testing.T) {
	spec, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	v := spec.Variables[TermsName]
	if want := binary.Size([MaxFilterTerms]filterTerm{}); v == nil || int(v.Size()) != want {
		t.Fatalf("%s %+v, want %d bytes", TermsName, v, want)
	}
}

// SetKeys sizes the keyed map's key to the fields its parts use, and
// aggKey decodes such a short key with the rest 0.
func TestKeySize(t *testing.T) {
	for _, c := range []struct {
		parts []KeyPart
		want  uint32
	}{
		{[]KeyPart{{Kind: KeyProbe}}, 8},
		{[]KeyPart{{Kind: KeyComm}}, 24},
		{[]KeyPart{{Kind: KeyPID}, {Kind: KeyComm}}, 32},
		{[]KeyPart{{Kind: KeyComm}, {Kind: KeyProbe}, {Kind: KeyTID}, {Kind: KeyArg, Val: 5}}, 56},
		{[]KeyPart{{Kind: KeyStr, Val: 1}}, 120},
		{[]KeyPart{{Kind: KeyStack}, {Kind: KeyComm}}, 136},
	} {
		spec, err := Spec()
		if err != nil {
			t.Fatal(err)
		}
		if err := SetKeys(spec, c.parts); err != nil {
			t.Fatal(err)
		}
		if got := spec.Maps["keyed"].KeySize; got != c.want {
			t.Errorf("%v: key size %d, want %d", c.parts, got, c.want)
		}
	}
	b := make([]byte, 32)
	b[0], b[4], b[8], b[9], b[24] = 7, 3, 'h', 'i', 42
	var k aggKey
	if err := k.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if k.Probe != 7 || k.Bucket != 3 || cString(k.Comm[:]) != "hi" || k.Nums != [MaxKeys]int64{42} || k.Caller != 0 {
		t.Errorf("decoded %+v", k)
	}
	if err := k.UnmarshalBinary(make([]byte, aggKeySize+1)); err == nil {
		t.Error("a key longer than agg_key decoded")
	}
}

// A counted CFI stack is struct trace_stack: the native walk, then the
// interpreter frames.
func TestDecodeWalked(t *testing.T) {
	raw := make([]byte, bpfunwind.StackRecordSize+8+InterpFrameSize*MaxInterpFrames)
	ne := binary.NativeEndian
	ne.PutUint32(raw, 2)
	ne.PutUint32(raw[4:], uint32(bpfunwind.StopOutermost))
	ne.PutUint64(raw[8:], 0x401000)
	ne.PutUint64(raw[16:], 0x402000)
	part := raw[bpfunwind.StackRecordSize:]
	ne.PutUint32(part, 1)
	ne.PutUint32(part[4:], 1)
	ne.PutUint64(part[8:], 0x7f00)
	ne.PutUint32(part[16:], 6)
	ne.PutUint32(part[20:], interp.FlagRunEnd)
	w, err := decodeWalked(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Native) != 2 || w.Native[1] != 0x402000 || w.Stop != bpfunwind.StopOutermost ||
		len(w.Interp) != 1 || w.Interp[0] != (interp.Raw{Code: 0x7f00, Instr: 6, Flags: interp.FlagRunEnd}) || w.InterpStop != 1 {
		t.Errorf("decoded %+v", w)
	}
	ne.PutUint32(part, MaxInterpFrames+1)
	if _, err := decodeWalked(raw); err == nil {
		t.Error("33 interpreter frames accepted")
	}
	// A native-only record (unwind.bpf.h's own) has no interpreter part.
	if w, err := decodeWalked(raw[:bpfunwind.StackRecordSize]); err != nil || w.Interp != nil {
		t.Errorf("native-only: %+v, %v", w, err)
	}
}

// decodeWalked faces whatever a map value holds: it fails or yields at
// most what the value has room for.
func FuzzDecodeWalked(f *testing.F) {
	raw := make([]byte, bpfunwind.StackRecordSize+8+InterpFrameSize*MaxInterpFrames)
	binary.NativeEndian.PutUint32(raw, 3)
	binary.NativeEndian.PutUint32(raw[bpfunwind.StackRecordSize:], 2)
	f.Add(raw)
	f.Add(raw[:bpfunwind.StackRecordSize+8])
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := decodeWalked(b)
		if err != nil {
			return
		}
		if 8+8*len(w.Native) > len(b) || len(w.Interp) > MaxInterpFrames ||
			len(w.Interp) > 0 && bpfunwind.StackRecordSize+8+InterpFrameSize*len(w.Interp) > len(b) {
			t.Fatalf("%d native and %d interpreter frames from %d bytes", len(w.Native), len(w.Interp), len(b))
		}
	})
}
