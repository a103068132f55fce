package debuginfo

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/probekit/probekit/internal/safeelf"
	"github.com/probekit/probekit/internal/test/testkit"
)

func paramsFixture(name string) string { return "../testdata/params/bin/" + name }

// openSigs opens the DWARF of a fixture and its function table.
func openSigs(t testing.TB, path string) (*Signatures, *safeelf.Funcs) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ef, err := safeelf.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenSignaturesELF(ef)
	if err != nil {
		t.Fatal(err)
	}
	funcs, err := ef.Functions()
	if err != nil {
		t.Fatal(err)
	}
	return s, funcs
}

func funcAddr(t testing.TB, funcs *safeelf.Funcs, name string) uint64 {
	t.Helper()
	for i := range funcs.Len() {
		if funcs.Name(i) == name {
			return funcs.Address(i)
		}
	}
	t.Fatalf("no function %s", name)
	return 0
}

// sigString writes a signature as "name(TYPE NAME@LOC, ...) TYPE@LOC",
// LOC a register name, CFA+N, "-" for none, with "abi:" when it came
// from the calling convention and "+" between pieces.
func sigString(m elf.Machine, sig *Signature) string {
	loc := func(l Location) string {
		var parts []string
		for _, p := range l.Pieces {
			switch p.Kind {
			case PieceReg:
				parts = append(parts, RegisterName(m, p.Reg))
			case PieceStack:
				parts = append(parts, fmt.Sprintf("CFA%+d", p.Offset))
			case PieceIndirect:
				parts = append(parts, fmt.Sprintf("[%s%+d]", RegisterName(m, p.Reg), p.Offset))
			default:
				parts = append(parts, "-")
			}
		}
		if len(parts) == 0 {
			parts = []string{"-"}
		}
		s := strings.Join(parts, "+")
		if l.FromABI {
			s = "abi:" + s
		}
		return s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s(", sig.Name)
	for i, p := range sig.Params {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s/%s/%d@%s", p.Type.Name, p.Name, p.Type.Kind, p.Type.Size, loc(p.Loc))
	}
	b.WriteString(")")
	for _, r := range sig.Results {
		fmt.Fprintf(&b, " %s/%s/%d@%s", r.Type.Name, r.Type.Kind, r.Type.Size, loc(r.Loc))
	}
	return b.String()
}

// The C fixture's functions, as readelf --debug-dump=info,loc shows
// their parameters at the entry, with the types spelled as in params.c.
var cSignatures = map[string]string{
	"emit":  "emit(int i/signed/4@rdi, const char * name/string/8@rsi) int/signed/4@abi:rax",
	"mix":   "mix(int i/signed/4@rdi, long l/signed/8@rsi, unsigned int u/unsigned/4@rdx, void * p/pointer/8@rcx, const char * s/string/8@r8, struct point * pt/pointer/8@r9) long/signed/8@abi:rax",
	"byval": "byval(struct point pt/struct/8@rdi, struct big b/struct/24@CFA+0, double d/float/8@xmm0, char * buf/string/8@rsi) long/signed/8@abi:rax",
	"label": "label(unsigned long r/unsigned/8@rdi) const char */string/8@abi:rax",
	"shapes": "shapes(int (*)(int) fn/pointer/8@rdi, char *const * argv/pointer/8@rsi, int (*)[4] grid/pointer/8@rdx, " +
		"unsigned char c/unsigned/1@rcx, enum color col/unsigned/4@r8, union word * w/pointer/8@r9, " +
		"ulong_t n/unsigned/8@CFA+0, const volatile short * vs/pointer/8@CFA+8, _Bool ok/bool/1@CFA+16, float f/float/4@xmm0) int/signed/4@abi:rax",
	"twice": "twice(int v/signed/4@rdi) int/signed/4@abi:rax",
}

// -O0: GCC places every parameter in the function's own frame
// (DW_OP_fbreg -N), valid after the prologue only; at the entry they are
// where the System V convention puts them. The one passed in memory
// (struct big) is described at CFA+0 by DWARF too.
var cSignaturesO0 = map[string]string{
	"emit": "emit(int i/signed/4@abi:rdi, const char * name/string/8@abi:rsi) int/signed/4@abi:rax",
	"byval": "byval(struct point pt/struct/8@abi:rdi, struct big b/struct/24@CFA+0, double d/float/8@abi:xmm0, " +
		"char * buf/string/8@abi:rsi) long/signed/8@abi:rax",
	"shapes": "shapes(int (*)(int) fn/pointer/8@abi:rdi, char *const * argv/pointer/8@abi:rsi, int (*)[4] grid/pointer/8@abi:rdx, " +
		"unsigned char c/unsigned/1@abi:rcx, enum color col/unsigned/4@abi:r8, union word * w/pointer/8@abi:r9, " +
		"ulong_t n/unsigned/8@CFA+0, const volatile short * vs/pointer/8@CFA+8, _Bool ok/bool/1@abi:CFA+16, float f/float/4@abi:xmm0) int/signed/4@abi:rax",
}

func TestSignatures(t *testing.T) {
	for _, tc := range []struct {
		file string
		want map[string]string
		m    elf.Machine
	}{
		{"params_O2", cSignatures, 0},   // DWARF 5, .debug_loclists
		{"params_v4", cSignatures, 0},   // DWARF 4, .debug_loc
		{"params_O0", cSignaturesO0, 0}, // exprlocs in the callee's frame
		// clang: DW_FORM_loclistx lists; a frame base of DW_OP_reg7
		// (rsp after the prologue: shapes pushes rbx first, and its n,
		// at CFA+0, is DW_OP_fbreg 16) makes the stack parameters the
		// convention's; pt by value is described by computed pieces
		// (DW_OP_breg5 ... DW_OP_stack_value), which name no place:
		// the convention gives rdi.
		{"params_clang", map[string]string{
			"mix":   cSignatures["mix"],
			"label": cSignatures["label"],
			"byval": "byval(struct point pt/struct/8@abi:rdi, struct big b/struct/24@abi:CFA+0, double d/float/8@xmm0, char * buf/string/8@rsi) long/signed/8@abi:rax",
			"shapes": "shapes(int (*)(int) fn/pointer/8@rdi, char *const * argv/pointer/8@rsi, int (*)[4] grid/pointer/8@rdx, " +
				"unsigned char c/unsigned/1@rcx, enum color col/unsigned/4@r8, union word * w/pointer/8@r9, " +
				"ulong_t n/unsigned/8@abi:CFA+0, const volatile short * vs/pointer/8@abi:CFA+8, _Bool ok/bool/1@abi:CFA+16, float f/float/4@xmm0) int/signed/4@abi:rax",
		}, 0},
		// AAPCS64: x0-x7, v0 for floats; a struct over 16 bytes is
		// passed by reference (its address in x1); the ninth integer
		// on the stack at the CFA (the entry's sp).
		{"params_arm64", map[string]string{
			"mix":   "mix(int i/signed/4@x0, long l/signed/8@x1, unsigned int u/unsigned/4@x2, void * p/pointer/8@x3, const char * s/string/8@x4, struct point * pt/pointer/8@x5) long/signed/8@abi:x0",
			"byval": "byval(struct point pt/struct/8@x0, struct big b/struct/24@[x1+0], double d/float/8@v0, char * buf/string/8@x2) long/signed/8@abi:x0",
			"shapes": "shapes(int (*)(int) fn/pointer/8@x0, char *const * argv/pointer/8@x1, int (*)[4] grid/pointer/8@x2, " +
				"unsigned char c/unsigned/1@x3, enum color col/unsigned/4@x4, union word * w/pointer/8@x5, " +
				"ulong_t n/unsigned/8@x6, const volatile short * vs/pointer/8@x7, _Bool ok/bool/1@CFA+0, float f/float/4@v0) int/signed/4@abi:x0",
		}, elf.EM_AARCH64},
		{"params_cc", map[string]string{
			"_ZN7Counter3addEiPKc": "add(Counter *const this/pointer/8@rdi, int v/signed/4@rsi, const char * tag/string/8@rdx) long/signed/8@abi:rax",
		}, 0},
		{"goparams", map[string]string{
			"main.emit": "main.emit(int i/signed/8@rax, string name/go string/16@rbx+rcx, *main.point p/pointer/8@rdi, " +
				"uint8 u/unsigned/1@rsi, bool ok/bool/1@r8) int/signed/8@abi:rax",
			"strconv.Atoi": "strconv.Atoi(string s/go string/16@rax+rbx) int/signed/8@abi:rax error/struct/16@-",
		}, 0},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s, funcs := openSigs(t, paramsFixture(tc.file))
			for fn, want := range tc.want {
				sig, err := s.At(funcAddr(t, funcs, fn))
				if err != nil {
					t.Errorf("%s: %v", fn, err)
					continue
				}
				m := tc.m
				if m == 0 {
					m = elf.EM_X86_64
				}
				if got := sigString(m, sig); got != want {
					t.Errorf("%s:\n got %s\nwant %s", fn, got, want)
				}
			}
		})
	}
}

// The C++ method's this is artificial, the others are not; its symbol
// name comes from DW_AT_linkage_name through DW_AT_specification.
func TestSignatureCPlusPlus(t *testing.T) {
	s, funcs := openSigs(t, paramsFixture("params_cc"))
	sig, err := s.At(funcAddr(t, funcs, "_ZN7Counter3addEiPKc"))
	if err != nil {
		t.Fatal(err)
	}
	if sig.LinkageName != "_ZN7Counter3addEiPKc" || len(sig.Params) != 3 || !sig.Params[0].Artificial || sig.Params[1].Artificial {
		t.Fatalf("%+v", sig)
	}
}

// An enumeration's values come with its type (params.c: enum color {
// RED, GREEN }).
func TestSignatureEnum(t *testing.T) {
	s, funcs := openSigs(t, paramsFixture("params_O2"))
	sig, err := s.At(funcAddr(t, funcs, "shapes"))
	if err != nil {
		t.Fatal(err)
	}
	var col *Type
	for i := range sig.Params {
		if sig.Params[i].Name == "col" {
			col = &sig.Params[i].Type
		}
	}
	if col == nil {
		t.Fatalf("no parameter col in %+v", sig)
	}
	if want := []Enumerator{{"RED", 0}, {"GREEN", 1}}; !slices.Equal(col.Enumerators, want) {
		t.Errorf("enum color: %+v, want %+v", col.Enumerators, want)
	}
	if n, ok := col.EnumName(1); !ok || n != "GREEN" {
		t.Errorf("EnumName(1) = %q, %v", n, ok)
	}
	if _, ok := col.EnumName(2); ok {
		t.Error("EnumName(2): a name for a value no enumerator has")
	}
	for _, p := range sig.Params {
		if p.Name != "col" && p.Type.Enumerators != nil {
			t.Errorf("%s of type %s has enumerators", p.Name, p.Type.Name)
		}
	}
}

// An address inside a function, or outside every unit, is no entry.
func TestSignatureNotEntry(t *testing.T) {
	s, funcs := openSigs(t, paramsFixture("params_O2"))
	for _, pc := range []uint64{funcAddr(t, funcs, "mix") + 1, 0, 1 << 62} {
		if _, err := s.At(pc); !errors.Is(err, ErrNoFunction) {
			t.Errorf("At(%#x): %v, want ErrNoFunction", pc, err)
		}
	}
}

// The struct passed by value carries its members, as the System V
// classification and a reader of its registers need them.
func TestSignatureFields(t *testing.T) {
	s, funcs := openSigs(t, paramsFixture("params_O2"))
	sig, err := s.At(funcAddr(t, funcs, "byval"))
	if err != nil {
		t.Fatal(err)
	}
	pt := sig.Params[0].Type
	got := fmt.Sprint(len(pt.Fields))
	for _, f := range pt.Fields {
		got += fmt.Sprintf(" %s@%d:%s/%d", f.Name, f.Offset, f.Type.Name, f.Type.Size)
	}
	if want := "2 x@0:int/4 y@4:int/4"; got != want {
		t.Errorf("struct point fields %q, want %q", got, want)
	}
}

// Damaged sections: location lists cut short leave the parameters whose
// lists are gone without a DWARF location (the convention then gives
// the entry's, FromABI), never a panic; mix's s and pt keep theirs,
// exprlocs in .debug_info (DW_OP_reg8, DW_OP_reg9). A damaged
// .debug_info is a located error.
func TestSignaturesDamaged(t *testing.T) {
	sec := elfSections(t, paramsFixture("params_O2"))
	ll, _ := sec("loclists")
	s, err := OpenSignatures(elf.EM_X86_64, func(n string) ([]byte, error) {
		if n == "loclists" {
			return ll[:len(ll)/8], nil
		}
		return sec(n)
	})
	if err != nil {
		t.Fatal(err)
	}
	_, funcs := openSigs(t, paramsFixture("params_O2"))
	sig, err := s.At(funcAddr(t, funcs, "mix"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sigString(elf.EM_X86_64, sig), "mix(int i/signed/4@abi:rdi, long l/signed/8@abi:rsi, unsigned int u/unsigned/4@abi:rdx, "+
		"void * p/pointer/8@abi:rcx, const char * s/string/8@r8, struct point * pt/pointer/8@r9) long/signed/8@abi:rax"; got != want {
		t.Errorf("with its lists cut:\n got %s\nwant %s", got, want)
	}
	info, _ := sec("info")
	bad := bytes.Clone(info)
	for i := 0x20; i < len(bad); i += 7 {
		bad[i] = 0xff
	}
	s, err = OpenSignatures(elf.EM_X86_64, func(n string) ([]byte, error) {
		if n == "info" {
			return bad, nil
		}
		return sec(n)
	})
	if err != nil {
		if _, ok := err.(*LinesError); !ok {
			t.Fatalf("unlocated error %T: %v", err, err)
		}
		return
	}
	for i := range funcs.Len() {
		if _, err := s.At(funcs.Address(i)); err != nil {
			var le *LinesError
			if !errors.As(err, &le) && !errors.Is(err, ErrNoFunction) {
				t.Errorf("%s: unlocated error %T: %v", funcs.Name(i), err, err)
			}
		}
	}
}

// TestSignaturesSup: params_O2 after dwz -m (params_dwz: the names and
// types it shares with a copy of itself moved to params_dwz.sup, named by
// .gnu_debugaltlink, DW_FORM_GNU_ref_alt and DW_FORM_GNU_strp_alt;
// params_dwz5: dwz --dwarf-5's .debug_sup, DW_FORM_ref_sup4 and
// DW_FORM_strp_sup), its common file found by OpenSup and given as
// SignaturesOptions.Sup, gives every function of params_O2 the
// signature params_O2 gives: names, types (their members, pointees and
// enumerators) and locations. Without it, the names and types kept in
// the common file are missing.
func TestSignaturesSup(t *testing.T) {
	plain, funcs := openSigs(t, paramsFixture("params_O2"))
	for _, file := range []string{"params_dwz", "params_dwz5"} {
		t.Run(file, func(t *testing.T) {
			path := paramsFixture(file)
			f, ef := openFixtureELF(t, path)
			sup, err := OpenSup(&File{File: f, Path: path}, ef, &Options{DebugDirs: []string{t.TempDir()}})
			if err != nil || sup == nil {
				t.Fatalf("OpenSup: %v, %v", sup, err)
			}
			s, err := OpenSignaturesELFWith(ef, &SignaturesOptions{Sup: sup})
			if err != nil {
				t.Fatal(err)
			}
			without, err := OpenSignaturesELF(ef)
			if err != nil {
				t.Fatal(err)
			}
			n, differ := 0, 0
			for i := range funcs.Len() {
				pc := funcs.Address(i)
				want, werr := plain.At(pc)
				got, err := s.At(pc)
				if (werr == nil) != (err == nil) {
					t.Errorf("%s %#x: %v, params_O2: %v", funcs.Name(i), pc, err, werr)
					continue
				}
				if werr != nil {
					continue
				}
				n++
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s:\n got %s\nwant %s", funcs.Name(i), sigString(elf.EM_X86_64, got), sigString(elf.EM_X86_64, want))
				}
				if w, err := without.At(pc); err != nil || !reflect.DeepEqual(w, want) {
					differ++
				}
			}
			// emit, mix, byval, label, shapes, twice, main.
			if n < 7 {
				t.Fatalf("%d functions with DWARF, want 7 or more", n)
			}
			if differ == 0 {
				t.Fatal("every signature reads the same without the supplementary file: the fixture moved nothing there")
			}
			sig, err := without.At(funcAddr(t, funcs, "emit"))
			if err != nil {
				t.Fatal(err)
			}
			if got := sigString(elf.EM_X86_64, sig); got == cSignatures["emit"] {
				t.Fatalf("without the supplementary file emit reads %s", got)
			}
		})
	}
}

// TestSignaturesSupLoop: a hostile common file whose const of const
// char (<0x71>, DW_AT_type <0x6a> as one DW_FORM_ref_udata byte at
// .debug_info+0x72) refers to itself ends at the depth bound: emit's
// name reads as a bounded chain of consts ending in "?", its other
// parameter as before.
func TestSignaturesSupLoop(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(paramsFixture("params_dwz.sup"))
	if err != nil {
		t.Fatal(err)
	}
	sef, err := safeelf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	at := sef.Section(".debug_info").Offset + 0x72
	if b[at] != 0x6a {
		t.Fatalf("params_dwz.sup: %#x at .debug_info+0x72, want 0x6a (readelf -wi: <0x71> DW_TAG_const_type)", b[at])
	}
	b[at] = 0x71
	path := filepath.Join(dir, "params_dwz")
	testkit.CopyFile(t, paramsFixture("params_dwz"), path)
	if err := os.WriteFile(path+".sup", b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, ef := openFixtureELF(t, path)
	sup, err := OpenSup(&File{File: f, Path: path}, ef, &Options{DebugDirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenSignaturesELFWith(ef, &SignaturesOptions{Sup: sup})
	if err != nil {
		t.Fatal(err)
	}
	_, funcs := openSigs(t, paramsFixture("params_O2"))
	sig, err := s.At(funcAddr(t, funcs, "emit"))
	if err != nil {
		t.Fatal(err)
	}
	if len(sig.Params) != 2 || sigString(elf.EM_X86_64, &Signature{Params: sig.Params[:1]}) != "(int i/signed/4@rdi)" {
		t.Fatalf("emit: %s", sigString(elf.EM_X86_64, sig))
	}
	name := sig.Params[1].Type.Name
	if !strings.HasPrefix(name, "const const const") || !strings.Contains(name, "?") || len(name) > 8*maxTypeDepth || sig.Params[1].Type.Kind != KindPointer {
		t.Fatalf("name's type %q (%v)", name, sig.Params[1].Type.Kind)
	}
}
