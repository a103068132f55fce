package debuginfo

import (
	"debug/dwarf"
	"strconv"
	"strings"
)

// Types of parameters, read from the type entries of DWARF (DWARF 5 §5)
// and spelled as the unit's language does: C's declarators ("const char
// *", "struct point *", "int (*)(int)"), C++'s class names without the
// struct keyword, Go's own names (Go's DWARF names every type).
//
// Types are read entry by entry with a bounded depth, not through
// debug/dwarf's Data.Type, which follows the whole graph of a type.

// TypeKind is the class of a type, as a reader of its value needs it.
type TypeKind uint8

const (
	// KindOther: void, a function, or an entry not understood.
	KindOther TypeKind = iota
	// KindSigned: a signed integer (signed char, int, long, a signed
	// enumeration).
	KindSigned
	// KindUnsigned: an unsigned integer (unsigned char, unsigned int,
	// size_t, an unsigned enumeration).
	KindUnsigned
	// KindBool: a boolean.
	KindBool
	// KindFloat: a floating-point number (float, double, long double).
	KindFloat
	// KindPointer: an address (a pointer, a C++ reference).
	KindPointer
	// KindString: a pointer to char (char *, const char *, signed or
	// unsigned char *): the address of a NUL-terminated string, by C's
	// convention.
	KindString
	// KindGoString: a Go string, a pointer and a length.
	KindGoString
	// KindStruct: a struct, union or class, by value.
	KindStruct
	// KindArray: an array, by value.
	KindArray
)

func (k TypeKind) String() string {
	switch k {
	case KindSigned:
		return "signed"
	case KindUnsigned:
		return "unsigned"
	case KindBool:
		return "bool"
	case KindFloat:
		return "float"
	case KindPointer:
		return "pointer"
	case KindString:
		return "string"
	case KindGoString:
		return "go string"
	case KindStruct:
		return "struct"
	case KindArray:
		return "array"
	}
	return "other"
}

// Type is the type of a parameter or a result.
type Type struct {
	// Name is the type as the language spells it.
	Name string
	// Kind says how to read a value of it.
	Kind TypeKind
	// Size is its size in bytes; 0 when unknown (void, a function).
	Size int64
	// Fields are the members of a struct, union or class (KindStruct),
	// in declaration order, to a depth of maxFieldDepth; nil otherwise.
	Fields []Field
	// Elem is the element of an array (KindArray) or what a pointer
	// points to (KindPointer, KindString; without its Fields); nil
	// otherwise and for void *.
	Elem *Type
	// ByReference is set on a C++ class that its ABI passes by
	// invisible reference (DW_AT_calling_convention
	// DW_CC_pass_by_reference, DWARF 5 §5.7.1): its value is not in the
	// argument registers, its address is.
	ByReference bool
	// Enumerators are the named values of an enumeration (or of a
	// typedef of one), in declaration order, at most maxEnumerators; nil
	// otherwise.
	Enumerators []Enumerator
}

// Enumerator is one named value of an enumeration.
type Enumerator struct {
	Name  string
	Value int64
}

// EnumName is the name of the enumerator whose value is v, the first
// declared when several share it.
func (t *Type) EnumName(v int64) (string, bool) {
	for _, e := range t.Enumerators {
		if e.Value == v {
			return e.Name, true
		}
	}
	return "", false
}

// Field is one member of a struct, union or class.
type Field struct {
	Name   string
	Offset int64 // bytes from the start of the value
	Type   Type
	// BitSize is the width of a bit field, 0 for other members.
	BitSize int64
}

// Limits of the types read for one parameter.
const (
	// maxTypeDepth bounds the chain of modifiers, pointers, arrays and
	// typedefs followed for one type: real code nests a few (char
	// *const *argv is three).
	maxTypeDepth = 24
	// maxFieldDepth bounds nested structs expanded into Fields.
	maxFieldDepth = 3
	// maxFields bounds the members read of one struct.
	maxFields = 256
	// maxEnumerators bounds the values read of one enumeration.
	maxEnumerators = 1024
)

// DW_LANG_* of the languages whose types are spelled apart (DWARF 5
// §7.12).
const (
	langCPlusPlus   = 0x04
	langCPlusPlus03 = 0x19
	langCPlusPlus11 = 0x1a
	langCPlusPlus14 = 0x21
	langGo          = 0x16
)

// DW_ATE_* (DWARF 5 §7.8).
const (
	ateAddress      = 0x01
	ateBoolean      = 0x02
	ateFloat        = 0x04
	ateSigned       = 0x05
	ateSignedChar   = 0x06
	ateUnsigned     = 0x07
	ateUnsignedChar = 0x08
	ateUTF          = 0x10
)

// Attributes debug/dwarf has no name for.
const (
	attrCallingConvention = dwarf.Attr(0x36) // DW_AT_calling_convention
	ccPassByReference     = 0x04             // DW_CC_pass_by_reference
	attrGoKind            = dwarf.Attr(0x2900)
	goKindString          = 24 // reflect.String, the value Go's linker writes
)

// typeReader reads type entries of one file and of its supplementary
// file.
type typeReader struct {
	files    *dwarfFiles
	r, sr    *dwarf.Reader // of files.d, of files.sup (made on first use)
	lang     int64
	addrSize int
	budget   int // entries left to read for the current parameter
}

// reader is the reader of the file (sup false) or of its supplementary
// file; nil when there is none.
func (tr *typeReader) reader(sup bool) *dwarf.Reader {
	if !sup {
		return tr.r
	}
	if tr.sr == nil && tr.files.sup != nil {
		tr.sr = tr.files.sup.Reader()
	}
	return tr.sr
}

// seek positions the reader of e's file at e, the next entry read
// being e; nil when that file has no reader.
func (tr *typeReader) seek(e entry) *dwarf.Reader {
	r := tr.reader(e.sup)
	if r != nil {
		r.Seek(e.Offset)
	}
	return r
}

func (tr *typeReader) entry(at ref) (entry, bool) {
	if tr.budget <= 0 {
		return entry{}, false
	}
	tr.budget--
	r := tr.reader(at.sup)
	if r == nil {
		return entry{}, false
	}
	r.Seek(at.off)
	e, err := r.Next()
	if err != nil || e == nil || e.Tag == 0 {
		return entry{}, false
	}
	return entry{e, at.sup}, true
}

// typeRef is the type entry e refers to by DW_AT_type.
func (tr *typeReader) typeRef(e entry) (ref, bool) { return refAttr(e, dwarf.AttrType) }

// name is e's DW_AT_name.
func (tr *typeReader) name(e entry) string {
	s, _ := tr.files.str(e, dwarf.AttrName)
	return s
}

func (tr *typeReader) cplusplus() bool {
	switch tr.lang {
	case langCPlusPlus, langCPlusPlus03, langCPlusPlus11, langCPlusPlus14:
		return true
	}
	return false
}

// typeOf is the type entry e refers to by DW_AT_type (void when it has
// none).
func (tr *typeReader) typeOf(e entry, depth int) Type {
	if e.Val(dwarf.AttrType) == nil {
		return Type{Name: "void"}
	}
	at, ok := tr.typeRef(e)
	if !ok {
		// A reference into a type unit (DW_FORM_ref_sig8): not
		// followed.
		return Type{Name: "?"}
	}
	return tr.typeAt(at, depth)
}

// typeAt reads the type at at.
func (tr *typeReader) typeAt(at ref, depth int) Type {
	e, ok := tr.entry(at)
	if !ok || depth > maxTypeDepth {
		return Type{Name: "?"}
	}
	t := Type{Name: tr.spell(e, "", depth)}
	tr.classify(&t, e, depth)
	return t
}

// classify sets t's kind, size and fields from entry e.
func (tr *typeReader) classify(t *Type, e entry, depth int) {
	size, _ := e.Val(dwarf.AttrByteSize).(int64)
	switch e.Tag {
	case dwarf.TagBaseType:
		t.Size = size
		enc, _ := e.Val(dwarf.AttrEncoding).(int64)
		switch enc {
		case ateSigned, ateSignedChar:
			t.Kind = KindSigned
		case ateUnsigned, ateUnsignedChar, ateUTF, ateAddress:
			t.Kind = KindUnsigned
		case ateBoolean:
			t.Kind = KindBool
		case ateFloat:
			t.Kind = KindFloat
		}
	case dwarf.TagEnumerationType:
		t.Size, t.Kind = size, KindSigned
		if u := tr.under(e, depth); u.Kind == KindUnsigned {
			t.Kind = KindUnsigned
		}
		if e.Children {
			t.Enumerators = tr.enumerators(e)
		}
	case dwarf.TagTypedef, dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagRestrictType,
		dwarf.Tag(0x47) /* DW_TAG_atomic_type */ :
		u := tr.under(e, depth)
		t.Kind, t.Size, t.Fields, t.Elem, t.ByReference, t.Enumerators = u.Kind, u.Size, u.Fields, u.Elem, u.ByReference, u.Enumerators
	case dwarf.TagPointerType, dwarf.TagReferenceType, dwarf.TagRvalueReferenceType:
		t.Kind, t.Size = KindPointer, size
		if t.Size == 0 {
			t.Size = int64(tr.addrSize)
		}
		if e.Tag == dwarf.TagPointerType && tr.lang != langGo && tr.pointsToChar(e, depth) {
			t.Kind = KindString
		}
		if at, ok := tr.typeRef(e); ok {
			// The pointee, without its members.
			u := tr.typeAt(at, max(depth+1, maxFieldDepth+1))
			t.Elem = &u
		}
	case dwarf.TagStructType, dwarf.TagUnionType, dwarf.TagClassType:
		t.Kind, t.Size = KindStruct, size
		if tr.lang == langGo {
			if k, _ := e.Val(attrGoKind).(int64); k == goKindString {
				t.Kind = KindGoString
			}
		}
		if cc, _ := e.Val(attrCallingConvention).(int64); cc == ccPassByReference {
			t.ByReference = true
		}
		if depth < maxFieldDepth+1 && e.Children {
			t.Fields = tr.fields(e, depth)
		}
	case dwarf.TagArrayType:
		t.Kind = KindArray
		u := tr.under(e, depth)
		t.Elem = &u
		if n := tr.count(e); n >= 0 && u.Size > 0 && n < 1<<40/max(u.Size, 1) {
			t.Size = n * u.Size
		}
	case dwarf.TagSubroutineType:
		if tr.lang == langGo {
			// A Go func value is a pointer to its closure.
			t.Kind, t.Size = KindPointer, int64(tr.addrSize)
		}
	case dwarf.TagPtrToMemberType:
		t.Kind, t.Size = KindOther, size
	}
}

// under is the type e refers to.
func (tr *typeReader) under(e entry, depth int) Type {
	return tr.typeOf(e, depth+1)
}

// pointsToChar: e, a pointer, points to (a qualified or typedef'd) char.
func (tr *typeReader) pointsToChar(e entry, depth int) bool {
	for d := depth; d <= maxTypeDepth; d++ {
		at, ok := tr.typeRef(e)
		if !ok {
			return false
		}
		if e, ok = tr.entry(at); !ok {
			return false
		}
		switch e.Tag {
		case dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagRestrictType:
			continue
		case dwarf.TagBaseType:
			enc, _ := e.Val(dwarf.AttrEncoding).(int64)
			size, _ := e.Val(dwarf.AttrByteSize).(int64)
			return size == 1 && (enc == ateSignedChar || enc == ateUnsignedChar)
		}
		return false
	}
	return false
}

// fields reads the members of the struct s (its children).
func (tr *typeReader) fields(s entry, depth int) []Field {
	type member struct {
		name    string
		loc     int64
		bits    int64
		typ     ref
		hasType bool
	}
	var ms []member
	r := tr.seek(s)
	if r == nil {
		return nil
	}
	if e, err := r.Next(); err != nil || e == nil || !e.Children {
		return nil
	}
	for n := 0; n < maxFields && tr.budget > 0; n++ {
		tr.budget--
		de, err := r.Next()
		if err != nil || de == nil || de.Tag == 0 {
			break
		}
		e := entry{de, s.sup}
		if e.Tag == dwarf.TagMember || e.Tag == dwarf.TagInheritance {
			m := member{}
			m.name = tr.name(e)
			m.loc, _ = e.Val(dwarf.AttrDataMemberLoc).(int64)
			if b, ok := e.Val(dwarf.AttrDataBitOffset).(int64); ok {
				m.loc = b / 8
			}
			m.bits, _ = e.Val(dwarf.AttrBitSize).(int64)
			m.typ, m.hasType = tr.typeRef(e)
			if e.Val(dwarf.AttrExternal) == nil && e.Val(dwarf.AttrDeclaration) == nil {
				ms = append(ms, m)
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
	out := make([]Field, 0, len(ms))
	for _, m := range ms {
		f := Field{Name: m.name, Offset: m.loc, BitSize: m.bits}
		if m.hasType && m.typ.off != 0 {
			f.Type = tr.typeAt(m.typ, depth+1)
		}
		out = append(out, f)
	}
	return out
}

// enumerators reads the values of the enumeration en (its children).
func (tr *typeReader) enumerators(en entry) []Enumerator {
	r := tr.seek(en)
	if r == nil {
		return nil
	}
	if e, err := r.Next(); err != nil || e == nil || !e.Children {
		return nil
	}
	var out []Enumerator
	for len(out) < maxEnumerators && tr.budget > 0 {
		tr.budget--
		de, err := r.Next()
		if err != nil || de == nil || de.Tag == 0 {
			break
		}
		e := entry{de, en.sup}
		if e.Tag == dwarf.TagEnumerator {
			name := tr.name(e)
			switch v := e.Val(dwarf.AttrConstValue).(type) {
			case int64:
				out = append(out, Enumerator{Name: name, Value: v})
			case uint64:
				out = append(out, Enumerator{Name: name, Value: int64(v)})
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
	return out
}

// count is the element count of array e (its first subrange), -1 when
// unknown.
func (tr *typeReader) count(e entry) int64 {
	if !e.Children || tr.budget <= 0 {
		return -1
	}
	tr.budget--
	r := tr.seek(e)
	if r == nil {
		return -1
	}
	if _, err := r.Next(); err != nil {
		return -1
	}
	sub, err := r.Next()
	if err != nil || sub == nil || sub.Tag != dwarf.TagSubrangeType {
		return -1
	}
	if n, ok := sub.Val(dwarf.AttrCount).(int64); ok {
		return n
	}
	if ub, ok := sub.Val(dwarf.AttrUpperBound).(int64); ok {
		lb, _ := sub.Val(dwarf.AttrLowerBound).(int64)
		return ub - lb + 1
	}
	return -1
}

// spell writes type e around the declarator decl (C's inside-out
// declarations: the pointer to an array of 4 ints is "int (*)[4]").
func (tr *typeReader) spell(e entry, decl string, depth int) string {
	if depth > maxTypeDepth {
		return "?" + pad(decl)
	}
	name := tr.name(e)
	if tr.lang == langGo && name != "" {
		return name + pad(decl)
	}
	next := func(d string) string {
		if e.Val(dwarf.AttrType) == nil {
			return "void" + pad(d)
		}
		at, ok := tr.typeRef(e)
		if !ok {
			return "?" + pad(d)
		}
		n, ok := tr.entry(at)
		if !ok {
			return "?" + pad(d)
		}
		return tr.spell(n, d, depth+1)
	}
	switch e.Tag {
	case dwarf.TagBaseType:
		return cBaseName(name) + pad(decl)
	case dwarf.TagTypedef:
		return name + pad(decl)
	case dwarf.TagStructType, dwarf.TagClassType, dwarf.TagUnionType, dwarf.TagEnumerationType:
		kw := map[dwarf.Tag]string{dwarf.TagStructType: "struct", dwarf.TagClassType: "class",
			dwarf.TagUnionType: "union", dwarf.TagEnumerationType: "enum"}[e.Tag]
		switch {
		case name == "":
			return kw + " {...}" + pad(decl)
		case tr.cplusplus():
			return name + pad(decl)
		}
		return kw + " " + name + pad(decl)
	case dwarf.TagPointerType, dwarf.TagReferenceType, dwarf.TagRvalueReferenceType:
		sigil := map[dwarf.Tag]string{dwarf.TagPointerType: "*", dwarf.TagReferenceType: "&", dwarf.TagRvalueReferenceType: "&&"}[e.Tag]
		d := sigil + decl
		if tr.wraps(e) {
			d = "(" + d + ")"
		}
		return next(d)
	case dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagRestrictType, dwarf.Tag(0x47):
		q := map[dwarf.Tag]string{dwarf.TagConstType: "const", dwarf.TagVolatileType: "volatile",
			dwarf.TagRestrictType: "restrict", dwarf.Tag(0x47): "_Atomic"}[e.Tag]
		if e.Tag == dwarf.TagRestrictType && tr.cplusplus() {
			q = "__restrict"
		}
		if tr.qualifiesPointer(e) {
			// char *const p: the qualifier goes after the star.
			return next(q + pad(decl))
		}
		return q + " " + next(decl)
	case dwarf.TagArrayType:
		n := tr.count(e)
		dim := "[]"
		if n >= 0 {
			dim = "[" + strconv.FormatInt(n, 10) + "]"
		}
		return next(decl + dim)
	case dwarf.TagSubroutineType:
		return next(decl + "(" + tr.paramTypes(e, depth) + ")")
	case dwarf.TagUnspecifiedType:
		if name == "" {
			name = "void"
		}
		return name + pad(decl)
	case dwarf.TagPtrToMemberType:
		return "(member pointer)" + pad(decl)
	}
	if name != "" {
		return name + pad(decl)
	}
	return "?" + pad(decl)
}

// wraps: the pointer e points to an array or function, whose declarator
// then needs parentheses.
func (tr *typeReader) wraps(e entry) bool {
	at, ok := tr.typeRef(e)
	if !ok {
		return false
	}
	n, ok := tr.entry(at)
	return ok && (n.Tag == dwarf.TagArrayType || n.Tag == dwarf.TagSubroutineType)
}

// qualifiesPointer: the qualifier e applies to a pointer type.
func (tr *typeReader) qualifiesPointer(e entry) bool {
	at, ok := tr.typeRef(e)
	if !ok {
		return false
	}
	n, ok := tr.entry(at)
	return ok && (n.Tag == dwarf.TagPointerType || n.Tag == dwarf.TagReferenceType || n.Tag == dwarf.TagRvalueReferenceType)
}

// paramTypes spells the parameter list of a function type.
func (tr *typeReader) paramTypes(e entry, depth int) string {
	if !e.Children {
		return "void"
	}
	var refs []ref
	variadic := false
	r := tr.seek(e)
	if r == nil {
		return "?"
	}
	if _, err := r.Next(); err != nil {
		return "?"
	}
	for n := 0; n < maxFields && tr.budget > 0; n++ {
		tr.budget--
		c, err := r.Next()
		if err != nil || c == nil || c.Tag == 0 {
			break
		}
		switch c.Tag {
		case dwarf.TagFormalParameter:
			if at, ok := tr.typeRef(entry{c, e.sup}); ok {
				refs = append(refs, at)
			}
		case dwarf.TagUnspecifiedParameters:
			variadic = true
		}
		if c.Children {
			r.SkipChildren()
		}
	}
	var parts []string
	for _, at := range refs {
		n, ok := tr.entry(at)
		if !ok {
			parts = append(parts, "?")
			continue
		}
		parts = append(parts, tr.spell(n, "", depth+1))
	}
	if variadic {
		parts = append(parts, "...")
	}
	if len(parts) == 0 {
		return "void"
	}
	return strings.Join(parts, ", ")
}

func pad(decl string) string {
	if decl == "" {
		return ""
	}
	if decl[0] == '[' || decl[0] == '(' && !strings.HasPrefix(decl, "(*") && !strings.HasPrefix(decl, "(&") {
		return decl
	}
	return " " + decl
}

// cBaseName is GCC's name of a C base type as programmers write it:
// GCC names them "long int", "long unsigned int", "short int", "char".
func cBaseName(name string) string {
	switch name {
	case "long int":
		return "long"
	case "long unsigned int":
		return "unsigned long"
	case "long long int":
		return "long long"
	case "long long unsigned int":
		return "unsigned long long"
	case "short int":
		return "short"
	case "short unsigned int":
		return "unsigned short"
	case "":
		return "?"
	}
	return name
}
