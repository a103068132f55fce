package debuginfo

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// listString writes entries as "lo-hi:EXPR" (hex), "default:EXPR".
func listString(es []locEntry) string {
	var parts []string
	for _, e := range es {
		if e.def {
			parts = append(parts, fmt.Sprintf("default:%x", e.expr))
		} else {
			parts = append(parts, fmt.Sprintf("%x-%x:%x", e.lo, e.hi, e.expr))
		}
	}
	return strings.Join(parts, " ")
}

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// DWARF 4 .debug_loc (DWARF 4 §2.6.2): address pairs relative to the
// unit's base, a base address selection entry (start = the largest
// address), a 2-byte expression length, a (0, 0) end.
func TestLocDWARF4(t *testing.T) {
	lr := &locReader{order: binary.LittleEndian, addrSize: 8, base: 0x1000}
	sec := cat(
		[]byte{0xee},                               // list at 1: the offset is followed
		le64(0x10), le64(0x20), []byte{1, 0, 0x55}, // rdi... reg5
		le64(^uint64(0)), le64(0x5000), // base address selection
		le64(0x4), le64(0x8), []byte{2, 0, 0x91, 0x10}, // fbreg 16
		le64(0), le64(0),
	)
	es, err := lr.readLoc(sec, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := listString(es), "1010-1020:55 5004-5008:9110"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if e := locAt(es, 0x1010); string(e) != "\x55" {
		t.Errorf("at 0x1010: %x", e)
	}
	if e := locAt(es, 0x1020); e != nil {
		t.Errorf("at 0x1020 (end, exclusive): %x", e)
	}
	// 32-bit addresses: the selection entry's start is 0xffffffff.
	lr32 := &locReader{order: binary.LittleEndian, addrSize: 4}
	sec32 := cat(le32(0xffffffff), le32(0x800), le32(1), le32(3), []byte{1, 0, 0x50}, le32(0), le32(0))
	if es, err := lr32.readLoc(sec32, 0); err != nil || listString(es) != "801-803:50" {
		t.Errorf("32-bit: %s, %v", listString(es), err)
	}
	for name, bad := range map[string][]byte{
		"no end":           cat(le64(1), le64(2), []byte{1, 0, 0x50}),
		"long expression":  cat(le64(1), le64(2), []byte{9, 0, 0x50}),
		"truncated length": cat(le64(1), le64(2), []byte{1}),
		"truncated pair":   le64(1),
	} {
		if _, err := lr.readLoc(bad, 0); err == nil || !strings.Contains(err.Error(), ".debug_loc+") {
			t.Errorf("%s: %v, want a located error", name, err)
		}
	}
	if _, err := lr.readLoc(sec, int64(len(sec))); err == nil {
		t.Error("offset at the end: no error")
	}
	if _, err := lr.readLoc(sec, -1); err == nil {
		t.Error("negative offset: no error")
	}
}

// DWARF 5 .debug_loclists: every DW_LLE_* kind (DWARF 5 §2.6.2, table
// 7.10), with .debug_addr entries for the *x kinds.
func TestLocDWARF5(t *testing.T) {
	addr := cat(le64(0x400000), le64(0x400100), le64(0x400200))
	lr := &locReader{order: binary.LittleEndian, addrSize: 8, base: 0x1000, addr: addr}
	sec := cat(
		[]byte{0x04, 0x10, 0x20, 1, 0x55}, // offset_pair from the unit's base
		[]byte{0x01, 1},                   // base_addressx: addr[1]
		[]byte{0x04, 0x00, 0x08, 1, 0x54}, // offset_pair from the new base
		[]byte{0x06}, le64(0x7000),        // base_address
		[]byte{0x04, 0x01, 0x02, 1, 0x51},
		[]byte{0x02, 0, 2, 1, 0x52},                               // startx_endx
		[]byte{0x03, 2, 0x80, 0x01, 1, 0x53},                      // startx_length, ULEB 128
		[]byte{0x07}, le64(0x9000), le64(0x9010), []byte{1, 0x58}, // start_end
		[]byte{0x08}, le64(0xa000), []byte{0x10, 2, 0x91, 0x00}, // start_length
		[]byte{0x05, 1, 0x59}, // default_location
		[]byte{0x00},
	)
	es, err := lr.readLoclists(sec, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "1010-1020:55 400100-400108:54 7001-7002:51 400000-400200:52 400200-400280:53 9000-9010:58 a000-a010:9100 default:59"
	if got := listString(es); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if e := locAt(es, 0x400104); string(e) != "\x54" {
		t.Errorf("at 0x400104: %x", e)
	}
	if e := locAt(es, 0xb000); string(e) != "\x59" {
		t.Errorf("outside every range, the default: %x", e)
	}
	for name, bad := range map[string][]byte{
		"no end":            {0x04, 0x10, 0x20, 1, 0x55},
		"unknown kind":      {0x09},
		"index outside":     {0x01, 7, 0x00},
		"long expression":   {0x04, 0x10, 0x20, 9, 0x55},
		"truncated address": {0x06, 1, 2},
		"truncated ULEB":    {0x04, 0x80},
	} {
		if _, err := lr.readLoclists(bad, 0); err == nil || !strings.Contains(err.Error(), ".debug_loclists+") {
			t.Errorf("%s: %v, want a located error", name, err)
		}
	}
	noAddr := &locReader{order: binary.LittleEndian, addrSize: 8}
	if _, err := noAddr.readLoclists([]byte{0x03, 0, 1, 1, 0x50, 0}, 0); err == nil {
		t.Error("startx_length without .debug_addr: no error")
	}
	// A list that never ends within maxLocEntries.
	long := make([]byte, 0, 5*(maxLocEntries+1))
	for range maxLocEntries + 1 {
		long = append(long, 0x04, 0x00, 0x01, 1, 0x50)
	}
	if _, err := lr.readLoclists(long, 0); err == nil {
		t.Error("endless list: no error")
	}
}

// DW_FORM_loclistx: an index into the offsets table at
// DW_AT_loclists_base, offsets relative to it (DWARF 5 §7.29).
func TestLoclistx(t *testing.T) {
	sec := cat(make([]byte, 12), le32(8), le32(10), []byte{0, 0, 0, 0x00})
	for i, want := range []int64{20, 22} {
		if got, err := loclistx(sec, binary.LittleEndian, 12, uint64(i), 4); err != nil || got != want {
			t.Errorf("index %d: %d, %v; want %d", i, got, err, want)
		}
	}
	for _, i := range []uint64{3, 1 << 40} {
		if _, err := loclistx(sec, binary.LittleEndian, 12, i, 4); err == nil {
			t.Errorf("index %d: no error", i)
		}
	}
	if _, err := loclistx(sec, binary.LittleEndian, 100, 0, 4); err == nil {
		t.Error("base past the end: no error")
	}
}

// Expressions at the entry, on x86-64 (CFA = rsp + 8) with a frame base
// of DW_OP_call_frame_cfa.
func TestDecodeLoc(t *testing.T) {
	fi := entryFrame(elf.EM_X86_64)
	fi.addrSize = 8
	fi.frameBase([]byte{0x9c})
	for _, tc := range []struct {
		expr []byte
		want string
	}{
		{[]byte{0x55}, "register5"},                                             // DW_OP_reg5
		{[]byte{0x90, 0x11}, "register17"},                                      // DW_OP_regx 17 (xmm0)
		{[]byte{0x91, 0x10}, "stack+16"},                                        // DW_OP_fbreg 16
		{[]byte{0x91, 0x6c}, "not available"},                                   // DW_OP_fbreg -20: the callee's frame
		{[]byte{0x77, 0x08}, "stack+0"},                                         // DW_OP_breg7 (rsp) 8 = CFA+0
		{[]byte{0x75, 0x08}, "indirect5+8"},                                     // DW_OP_breg5 (rdi) 8
		{[]byte{0x9c}, "stack+0"},                                               // DW_OP_call_frame_cfa
		{[]byte{0xa3, 1, 0x55, 0x9f}, "register5"},                              // DW_OP_entry_value(reg5) stack_value
		{[]byte{0xf3, 1, 0x54, 0x9f}, "register4"},                              // GNU form
		{[]byte{0xa3, 1, 0x55}, "not available"},                                // no stack_value
		{[]byte{0x53, 0x93, 0x08, 0x52, 0x93, 0x08}, "register3/8 register2/8"}, // Go's string: rbx, rcx
		{[]byte{0x93, 0x04, 0x54, 0x93, 0x04}, "not available/4 register4/4"},   // first half optimized out
		{[]byte{0x31, 0x9f}, "not available"},                                   // DW_OP_lit1 stack_value: a constant
		{[]byte{0x03, 1, 2, 3, 4, 5, 6, 7, 8}, "not available"},                 // DW_OP_addr: a global
		{[]byte{0x91}, "not available"},                                         // truncated
		{[]byte{0xff, 0x93, 0x08}, "not available"},                             // unknown operator
		{[]byte{}, ""}, // optimized out
	} {
		var parts []string
		for _, p := range fi.decodeLoc(tc.expr) {
			s := p.Kind.String()
			switch p.Kind {
			case PieceReg:
				s += fmt.Sprint(p.Reg)
			case PieceStack:
				s += fmt.Sprintf("%+d", p.Offset)
			case PieceIndirect:
				s += fmt.Sprintf("%d%+d", p.Reg, p.Offset)
			}
			if p.Size != 0 {
				s += fmt.Sprintf("/%d", p.Size)
			}
			parts = append(parts, s)
		}
		if got := strings.Join(parts, " "); got != tc.want {
			t.Errorf("% x: %q, want %q", tc.expr, got, tc.want)
		}
	}
	// A frame base the prologue sets (clang -O0: DW_OP_reg6, rbp) gives
	// no stack slot at the entry.
	fi.frameBase([]byte{0x56})
	if p := fi.decodeLoc([]byte{0x91, 0x10}); len(p) != 1 || p[0].Kind != PieceNone {
		t.Errorf("fbreg with an rbp frame base: %+v", p)
	}
	// clang's DW_OP_reg7 (rsp) as the frame base: rsp after the
	// prologue, which may have moved it.
	fi.frameBase([]byte{0x57})
	if p := fi.decodeLoc([]byte{0x91, 0x08}); len(p) != 1 || p[0].Kind != PieceNone {
		t.Errorf("fbreg 8 with an rsp frame base: %+v", p)
	}
	// DW_OP_breg7 (rsp) 16 as the frame base: CFA + 8.
	fi.frameBase([]byte{0x77, 0x10})
	if p := fi.decodeLoc([]byte{0x91, 0x00}); len(p) != 1 || p[0] != (Piece{Kind: PieceStack, Offset: 8}) {
		t.Errorf("fbreg 0 with an rsp+16 frame base: %+v", p)
	}
}

// A list with no entry at the entry, but a later one saying the value is
// the entry value of a register: the parameter was in that register.
func TestEntryValueElsewhere(t *testing.T) {
	l := locList{{lo: 0x20, hi: 0x30, expr: []byte{0x5c}}, {lo: 0x30, hi: 0x40, expr: []byte{0xa3, 1, 0x51, 0x9f}}}
	if r, ok := l.entryReg(); !ok || r != 1 {
		t.Errorf("entryReg %d, %v; want 1 (rdx)", r, ok)
	}
	if _, ok := (locList{{lo: 0, hi: 1, expr: []byte{0x5c}}}).entryReg(); ok {
		t.Error("a plain register later in the function is not the entry's")
	}
}

func TestRegisterName(t *testing.T) {
	for _, tc := range []struct {
		m    elf.Machine
		reg  int
		want string
	}{
		{elf.EM_X86_64, 5, "rdi"}, {elf.EM_X86_64, 4, "rsi"}, {elf.EM_X86_64, 1, "rdx"}, {elf.EM_X86_64, 2, "rcx"},
		{elf.EM_X86_64, 8, "r8"}, {elf.EM_X86_64, 9, "r9"}, {elf.EM_X86_64, 0, "rax"}, {elf.EM_X86_64, 3, "rbx"},
		{elf.EM_X86_64, 17, "xmm0"}, {elf.EM_X86_64, 32, "xmm15"}, {elf.EM_X86_64, 33, ""},
		{elf.EM_AARCH64, 0, "x0"}, {elf.EM_AARCH64, 30, "x30"}, {elf.EM_AARCH64, 31, "sp"}, {elf.EM_AARCH64, 64, "v0"},
		{elf.EM_S390, 0, ""},
	} {
		if got := RegisterName(tc.m, tc.reg); got != tc.want {
			t.Errorf("%v %d: %q, want %q", tc.m, tc.reg, got, tc.want)
		}
	}
}
