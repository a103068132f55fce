package privilege

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/privileges.md's generated tables")

const docPath = "../../docs/privileges.md"

// Markers around the generated part of docs/privileges.md.
const (
	docBegin = "<!-- generated from internal/privilege's Table and Uses (go test ./internal/privilege -update): begin -->\n"
	docEnd   = "<!-- generated: end -->\n"
)

// renderTables writes Table and Uses as Markdown.
func renderTables() string {
	var b strings.Builder
	b.WriteString("| Work | What | Capabilities | When | The kernel's check |\n|---|---|---|---|---|\n")
	for _, r := range Table {
		caps := capList(r.Need)
		if r.OrAdmin {
			caps += " (or CAP_SYS_ADMIN)"
		}
		when := r.When
		if when == "" {
			when = "always"
		}
		b.WriteString("| " + r.Work.String() + " | " + r.What + " | " + caps + " | " + when + " | " + r.Why + " |\n")
	}
	b.WriteString("\n| Command | Work | Note |\n|---|---|---|\n")
	for _, u := range Uses {
		var works []string
		for _, w := range u.Works {
			works = append(works, w.String())
		}
		wl := strings.Join(works, ", ")
		if wl == "" {
			wl = "none"
		}
		b.WriteString("| " + u.Command + " | " + wl + " | " + u.Note + " |\n")
	}
	return b.String()
}

// TestDocTables: docs/privileges.md's tables are Table and Uses.
func TestDocTables(t *testing.T) {
	for w := range numWork {
		if w.String() == "" || strings.HasPrefix(w.String(), "work ") {
			t.Fatalf("work %d has no name", w)
		}
		if len(rules(w)) == 0 {
			t.Fatalf("work %v has no rule in Table", w)
		}
	}
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, docBegin), strings.Index(doc, docEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no generated section (%q ... %q)", docPath, docBegin, docEnd)
	}
	want := renderTables()
	got := doc[i+len(docBegin) : j]
	if got == want {
		return
	}
	if !*update {
		t.Fatalf("%s's tables are not internal/privilege's (go test ./internal/privilege -update):\n%s", docPath, want)
	}
	doc = doc[:i+len(docBegin)] + want + doc[j:]
	if err := os.WriteFile(docPath, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}
