package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// list --functions --params: the signature from DWARF after each line of
// a function it describes (the stripped C fixture's, through its debug
// file; the Go fixture's), nothing after the others.
func TestListFunctionsParams(t *testing.T) {
	for _, tc := range []struct {
		file, glob string
		want       []string
	}{
		{"params_stripped", "*", []string{
			" main  int main(int argc, char **argv)",
			" emit  int emit(int i, const char *name)",
			" mix  long mix(int i, long l, unsigned int u, void *p, const char *s, struct point *pt)",
			" byval  long byval(struct point pt, struct big b, double d, char *buf)",
			" label  const char *label(unsigned long r)",
			" shapes  int shapes(int (*fn)(int), char *const *argv, int (*grid)[4], unsigned char c, enum color col, " +
				"union word *w, ulong_t n, const volatile short *vs, _Bool ok, float f)",
			" _start\n",
		}},
		{"params_cc", "_ZN7Counter*", []string{" _ZN7Counter3addEiPKc  long add(Counter *const this, int v, const char *tag)\n"}},
		{"goparams", "main.*", []string{
			" main.emit  func main.emit(i int, name string, p *main.point, u uint8, ok bool) int\n",
			" main.main  func main.main()\n",
		}},
		{"goparams", "strconv.Atoi", []string{" strconv.Atoi  func strconv.Atoi(s string) (int, error)\n"}},
	} {
		var out, errOut bytes.Buffer
		if code := run([]string{"list", "--functions", "--params", paramsFixture(tc.file), tc.glob}, &out, &errOut); code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.file, code, errOut.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s %s: no %q in\n%s", tc.file, tc.glob, w, out.String())
			}
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"list", "--functions", "--params", "--json", paramsFixture("params_stripped"), "emit"}, &out, &errOut); code != 0 {
		t.Fatalf("json: exit %d: %s", code, errOut.String())
	}
	var doc struct {
		Functions []struct {
			Name, Signature string
		}
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Functions) != 1 || doc.Functions[0].Signature != "int emit(int i, const char *name)" {
		t.Errorf("json: %+v", doc)
	}
}

func TestDeclare(t *testing.T) {
	for _, tc := range [][3]string{
		{"const char *", "s", "const char *s"},
		{"int (*)(int)", "fn", "int (*fn)(int)"},
		{"int (*)[4]", "grid", "int (*grid)[4]"},
		{"int[4]", "a", "int a[4]"},
		{"Counter *const", "this", "Counter *const this"},
		{"int &", "r", "int &r"},
		{"unsigned long", "n", "unsigned long n"},
		{"void *", "", "void *"},
	} {
		if got := declare(tc[0], tc[1]); got != tc[2] {
			t.Errorf("declare(%q, %q) = %q, want %q", tc[0], tc[1], got, tc[2])
		}
	}
}
