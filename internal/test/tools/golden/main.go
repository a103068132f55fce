// Command golden writes the readelf goldens of testdata/golden: for each
// ELF file with stapsdt notes, OUT/<name>.json records what binutils'
// readelf prints about it (header, program headers, .stapsdt.base, every
// NT_STAPSDT note). The usdt tests compare probekit's parser with these
// files, so the generator parses readelf's text and never probekit's code.
//
// Files that are not ELF or carry no stapsdt note are skipped with a
// message.
//
//	go run ./internal/test/tools/golden -o testdata/golden testdata/bin/*
//	go run ./internal/test/tools/golden -o DIR -name NAME FILE
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/probekit/probekit/internal/test/tools/golden/readelf"
)

func main() {
	out := flag.String("o", "testdata/golden", "output `directory`")
	name := flag.String("name", "", "store the single FILE's golden as `NAME`.json instead of its base name")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: golden [-o DIR] [-name NAME] FILE...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || (*name != "" && flag.NArg() != 1) {
		flag.Usage()
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "golden:", err)
		os.Exit(1)
	}
	failed := false
	for _, path := range flag.Args() {
		n := *name
		if n == "" {
			n = filepath.Base(path)
		}
		if err := write(*out, n, path); err != nil {
			fmt.Fprintln(os.Stderr, "golden:", err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

func write(dir, name, path string) error {
	if st, err := os.Stat(path); err != nil {
		return err
	} else if !st.Mode().IsRegular() {
		fmt.Fprintf(os.Stderr, "golden: skip %s: not a regular file\n", path)
		return nil
	}
	g, err := readelf.Read(path)
	if errors.Is(err, readelf.ErrNotELF) {
		fmt.Fprintf(os.Stderr, "golden: skip %s: not ELF\n", path)
		return nil
	}
	if err != nil {
		return err
	}
	if len(g.Probes) == 0 {
		fmt.Fprintf(os.Stderr, "golden: skip %s: no stapsdt notes\n", path)
		return nil
	}
	g.File = name
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "\t")
	if err := enc.Encode(g); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".json"), buf.Bytes(), 0o644)
}
