package debuginfo

import (
	"debug/elf"
	"fmt"
	"strings"
	"testing"
)

var (
	tInt     = Type{Name: "int", Kind: KindSigned, Size: 4}
	tLong    = Type{Name: "long", Kind: KindSigned, Size: 8}
	tChar    = Type{Name: "char", Kind: KindSigned, Size: 1}
	tFloat   = Type{Name: "float", Kind: KindFloat, Size: 4}
	tDouble  = Type{Name: "double", Kind: KindFloat, Size: 8}
	tLDouble = Type{Name: "long double", Kind: KindFloat, Size: 16}
	tPtr     = Type{Name: "void *", Kind: KindPointer, Size: 8}
	tInt128  = Type{Name: "__int128", Kind: KindSigned, Size: 16}
)

func structOf(fields ...Type) Type {
	t := Type{Name: "struct s", Kind: KindStruct}
	for _, f := range fields {
		a := sysvAlign(f)
		t.Size = (t.Size + a - 1) / a * a
		t.Fields = append(t.Fields, Field{Name: fmt.Sprint("f", len(t.Fields)), Offset: t.Size, Type: f})
		t.Size += f.Size
	}
	a := sysvAlign(t)
	t.Size = (t.Size + a - 1) / a * a
	return t
}

func abiString(locs []Location) string {
	var parts []string
	for _, l := range locs {
		var ps []string
		for _, p := range l.Pieces {
			if p.Kind == PieceStack {
				ps = append(ps, fmt.Sprintf("CFA%+d", p.Offset))
			} else {
				ps = append(ps, RegisterName(elf.EM_X86_64, p.Reg))
			}
		}
		parts = append(parts, strings.Join(ps, "+"))
	}
	return strings.Join(parts, " ")
}

// The System V AMD64 psABI's examples and rules (§3.2.3): registers by
// class, in order; aggregates by eightbyte; MEMORY on the stack.
func TestSysVParams(t *testing.T) {
	params := func(ts ...Type) []Param {
		var ps []Param
		for _, t := range ts {
			ps = append(ps, Param{Type: t})
		}
		return ps
	}
	big := structOf(tLong, tLong, tLong)
	for _, tc := range []struct {
		name string
		ps   []Param
		ret  *Type
		want string
	}{
		{"integers", params(tInt, tLong, tChar, tPtr, tInt, tInt), nil, "rdi rsi rdx rcx r8 r9"},
		{"seventh integer on the stack", params(tInt, tInt, tInt, tInt, tInt, tInt, tLong, tChar), nil, "rdi rsi rdx rcx r8 r9 CFA+0 CFA+8"},
		{"floats apart", params(tDouble, tInt, tFloat), nil, "xmm0 rdi xmm1"},
		{"struct {int, int} in one register", params(structOf(tInt, tInt)), nil, "rdi"},
		{"struct {double, long}: SSE then INTEGER", params(structOf(tDouble, tLong)), nil, "xmm0+rdi"},
		{"struct {int, float}: one INTEGER eightbyte", params(structOf(tInt, tFloat)), nil, "rdi"},
		{"struct {float, float}: SSE", params(structOf(tFloat, tFloat)), nil, "xmm0"},
		{"over 16 bytes in memory", params(tInt, big, tInt), nil, "rdi CFA+0 rsi"},
		{"long double in memory, 16-aligned", params(tLong, tInt, tInt, tInt, tInt, tInt, tInt, tLDouble), nil, "rdi rsi rdx rcx r8 r9 CFA+0 CFA+16"},
		{"__int128 takes two", params(tInt128, tInt), nil, "rdi+rsi rdx"},
		{"not enough registers left for both eightbytes", params(tInt, tInt, tInt, tInt, tInt, structOf(tLong, tLong)), nil, "rdi rsi rdx rcx r8 CFA+0"},
		{"result in memory: its address in rdi", params(tInt), &big, "rsi"},
		{"by invisible reference", params(Type{Name: "S", Kind: KindStruct, Size: 8, ByReference: true}), nil, "rdi"},
	} {
		locs, ok := sysvParams(tc.ps, tc.ret)
		if !ok {
			t.Errorf("%s: not classified", tc.name)
			continue
		}
		if got := abiString(locs); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	// A type it cannot classify stops it: the positions after it would
	// be guesses.
	if _, ok := sysvParams(params(tInt, Type{Name: "?"}, tInt), nil); ok {
		t.Error("an unknown type was classified")
	}
}

func TestCBaseName(t *testing.T) {
	for gcc, want := range map[string]string{
		"long int": "long", "long unsigned int": "unsigned long", "short int": "short",
		"short unsigned int": "unsigned short", "long long int": "long long",
		"long long unsigned int": "unsigned long long", "char": "char", "unsigned int": "unsigned int",
		"_Bool": "_Bool", "": "?",
	} {
		if got := cBaseName(gcc); got != want {
			t.Errorf("%q: %q, want %q", gcc, got, want)
		}
	}
}
