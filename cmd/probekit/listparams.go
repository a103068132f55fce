package main

import (
	"strings"

	"github.com/probekit/probekit/debuginfo"
	"github.com/probekit/probekit/uprobe"
)

// list --functions --params: each function's signature from DWARF
// (uprobe.Binary.Params), after its line, as its language writes it:
//
//	00000000000013c0 0000000000000021 .symtab    mix  long mix(int i, long l, unsigned int u, void *p, const char *s, struct point *pt)
//	000000000049ee80 000000000000001c .symtab    main.emit  func main.emit(i int, name string, p *main.point, u uint8, ok bool) int
//
// and in JSON as "signature". A function DWARF does not describe gets
// nothing.

// signatureOf is fn's signature as text, "" when DWARF has none.
func signatureOf(bin *uprobe.Binary, fn uprobe.Function) string {
	sig, err := bin.Params(fn)
	if err != nil {
		return ""
	}
	return formatSignature(sig)
}

func formatSignature(sig *debuginfo.Signature) string {
	var b strings.Builder
	if sig.Go {
		b.WriteString("func " + sig.Name + "(")
		for i, p := range sig.Params {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(p.Name + " " + p.Type.Name)
		}
		b.WriteString(")")
		switch len(sig.Results) {
		case 0:
		case 1:
			b.WriteString(" " + sig.Results[0].Type.Name)
		default:
			var rs []string
			for _, r := range sig.Results {
				rs = append(rs, r.Type.Name)
			}
			b.WriteString(" (" + strings.Join(rs, ", ") + ")")
		}
		return b.String()
	}
	ret := "void"
	if len(sig.Results) > 0 {
		ret = sig.Results[0].Type.Name
	}
	b.WriteString(declare(ret, sig.Name) + "(")
	for i, p := range sig.Params {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(declare(p.Type.Name, p.Name))
	}
	if sig.Variadic {
		if len(sig.Params) > 0 {
			b.WriteString(", ")
		}
		b.WriteString("...")
	} else if len(sig.Params) == 0 {
		b.WriteString("void")
	}
	b.WriteString(")")
	return b.String()
}

// declare puts name into the C declarator of type t, as spelled by
// debuginfo: "const char *" s is "const char *s", "int (*)(int)" fn is
// "int (*fn)(int)", "int[4]" a is "int a[4]".
func declare(t, name string) string {
	switch {
	case name == "":
		return t
	case strings.Contains(t, "(*)"):
		return strings.Replace(t, "(*)", "(*"+name+")", 1)
	case strings.HasSuffix(t, "*") || strings.HasSuffix(t, "&"):
		return t + name
	case strings.HasSuffix(t, "]"):
		if i := strings.IndexByte(t, '['); i > 0 {
			return t[:i] + " " + name + t[i:]
		}
	}
	return t + " " + name
}
