package bpfunwind_test

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

type extent struct{ first, count uint32 }

// objectsIn reads the objects map: the ids with rows, and where.
func objectsIn(t *testing.T, tables *bpfunwind.Tables) map[uint32]extent {
	t.Helper()
	m := tables.Replacements()[bpfunwind.ObjectsMap]
	out := map[uint32]extent{}
	var v [8]byte
	for id := uint32(1); id < m.MaxEntries(); id++ {
		if err := m.Lookup(id, v[:]); err != nil {
			t.Fatal(err)
		}
		if e := (extent{binary.NativeEndian.Uint32(v[:]), binary.NativeEndian.Uint32(v[4:])}); e.count != 0 {
			out[id] = e
		}
	}
	return out
}

// mappedIDs are the object ids of process pid's mappings in the process
// map, by mapping start.
func mappedIDs(t *testing.T, tables *bpfunwind.Tables, pid int) map[uint64]uint32 {
	t.Helper()
	v := make([]byte, tables.Replacements()[bpfunwind.ProcsMap].ValueSize())
	if err := tables.Replacements()[bpfunwind.ProcsMap].Lookup(uint32(pid), v); err != nil {
		t.Fatal(err)
	}
	out := map[uint64]uint32{}
	for i := range binary.NativeEndian.Uint32(v) {
		e := v[8+32*i:]
		out[binary.NativeEndian.Uint64(e)] = binary.NativeEndian.Uint32(e[24:])
	}
	return out
}

// exeID is the object id of the executable fx's rows in objs: the one
// whose row count is fx's.
func exeID(t *testing.T, objs map[uint32]extent, fx string) uint32 {
	t.Helper()
	rows, err := bpfunwind.Build(loadTable(t, fx))
	if err != nil {
		t.Fatal(err)
	}
	var id uint32
	for i, e := range objs {
		if e.count == uint32(len(rows)) {
			if id != 0 {
				t.Fatalf("two objects of %d rows: %v", len(rows), objs)
			}
			id = i
		}
	}
	if id == 0 {
		t.Fatalf("no object of %s's %d rows in %v", fx, len(rows), objs)
	}
	return id
}

func newTables(t *testing.T, opts *bpfunwind.Options) *bpfunwind.Tables {
	t.Helper()
	testkit.RequireKernel(t)
	tables, err := bpfunwind.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tables.Close() })
	return tables
}

func addPID(t *testing.T, tables *bpfunwind.Tables, pid int) {
	t.Helper()
	p, err := procmaps.Open(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := tables.Add(p); err != nil {
		t.Fatal(err)
	}
}

// A freed object's id and rows are not given to another object before
// ReuseAfter: a walk that read the id just before the removal would
// read the other object's rows under it. The old Tables gave the id
// (and the rows) to the next object at once. An object loaded again
// within the time gets its own id and rows back; after it, the id is
// reused.
func TestReuseAfter(t *testing.T) {
	fxA, fxB := testkit.Fixture("stack_chain_nofp"), testkit.Fixture("recurse")
	tables := newTables(t, nil)
	pA := testkit.Start(t, fxA)
	addPID(t, tables, pA.PID())
	before := objectsIn(t, tables)
	idA := exeID(t, before, fxA)
	if err := tables.Remove(pA.PID()); err != nil {
		t.Fatal(err)
	}
	if s := tables.Stats(); s.Objects != 0 || s.Quarantined != len(before) || s.QuarantinedRows == 0 {
		t.Fatalf("after the removal: %+v, %d objects before", s, len(before))
	}
	if objs := objectsIn(t, tables); len(objs) != 0 {
		t.Fatalf("freed objects still have rows in the map: %v", objs)
	}
	// Another program: its libc and ld.so are the same objects, back at
	// their ids; its executable takes none of the freed ids and rows.
	pB := testkit.Start(t, fxB)
	addPID(t, tables, pB.PID())
	after := objectsIn(t, tables)
	idB := exeID(t, after, fxB)
	if _, freed := before[idB]; freed {
		t.Errorf("the new executable got freed id %d (%v), freed %v", idB, after, before)
	}
	a, b := before[idA], after[idB]
	if b.first < a.first+a.count && a.first < b.first+b.count {
		t.Errorf("the new executable's rows %+v overlap the freed %+v", b, a)
	}
	for id, e := range after {
		if id != idB && before[id] != e {
			t.Errorf("object %d at %+v, was %+v before", id, e, before[id])
		}
	}
	if s := tables.Stats(); s.Quarantined != 1 || s.Objects != len(before) {
		t.Errorf("with the second program: %+v", s)
	}
	// Under Refresh or a load, an id freed longer ago than ReuseAfter
	// is given out again.
	short := newTables(t, &bpfunwind.Options{ReuseAfter: 100 * time.Millisecond})
	addPID(t, short, pA.PID())
	before = objectsIn(t, short)
	idA = exeID(t, before, fxA)
	if err := short.Remove(pA.PID()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	addPID(t, short, pB.PID())
	after = objectsIn(t, short)
	// libc and ld.so took theirs back: the executable's is free.
	if idB := exeID(t, after, fxB); idB != idA {
		t.Errorf("after ReuseAfter, the executable got id %d, not the freed %d (%v, before %v)", idB, idA, after, before)
	}
	if s := short.Stats(); s.Quarantined != 0 {
		t.Errorf("after ReuseAfter: %+v", s)
	}
}

// An object that does not fit the rows map is refused with ErrFull,
// naming it, counted under Stats.Refused, and its mappings get no
// object (frame pointers), never part of a table; once rows are free,
// it is loaded.
func TestFull(t *testing.T) {
	fx := testkit.Fixture("stack_chain_nofp")
	exeRows, err := bpfunwind.Build(loadTable(t, fx))
	if err != nil {
		t.Fatal(err)
	}
	p := testkit.Start(t, fx)
	proc, err := procmaps.Open(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	objs, err := proc.Objects()
	if err != nil {
		t.Fatal(err)
	}
	var libcPath string
	var libcStart uint64
	for _, ob := range objs {
		if strings.Contains(ob.Path, "libc.so") {
			libcPath = ob.Path
			for _, m := range ob.Mappings {
				if m.Perms&procmaps.Exec != 0 {
					libcStart = m.Start
				}
			}
		}
	}
	if libcStart == 0 {
		t.Fatalf("no libc mapped in %v", objs)
	}
	// Room for the executable and ld.so, not for libc (23,000 rows).
	tables := newTables(t, &bpfunwind.Options{Rows: 4096, ReuseAfter: time.Millisecond})
	addPID(t, tables, p.PID())
	s := tables.Stats()
	if s.Refused["rows full"] != 1 || s.Objects != 2 || s.Rows < len(exeRows) || s.Rows > 4096 {
		t.Errorf("stats %+v", s)
	}
	var full error
	for _, err := range tables.Errors() {
		if errors.Is(err, bpfunwind.ErrFull) {
			full = err
		}
	}
	if full == nil || !strings.Contains(full.Error(), libcPath) || !strings.Contains(full.Error(), bpfunwind.RowsEnv) {
		t.Errorf("errors %v: want ErrFull naming %s and %s", tables.Errors(), libcPath, bpfunwind.RowsEnv)
	}
	if id := mappedIDs(t, tables, p.PID())[libcStart]; id != 0 {
		t.Errorf("libc's mapping has object %d", id)
	}
	// Added again: refused again without a second count (nothing was
	// freed meanwhile).
	addPID(t, tables, p.PID())
	if s := tables.Stats(); s.Refused["rows full"] != 1 {
		t.Errorf("added again: %+v", s)
	}
	// Removed: the refusal is still reported; once the freed rows are
	// free (ReuseAfter), the next Add tries libc again.
	if err := tables.Remove(p.PID()); err != nil {
		t.Fatal(err)
	}
	if errs := tables.Errors(); len(errs) != 1 || !strings.Contains(errs[0].Error(), libcPath) {
		t.Errorf("errors after the removal: %v", errs)
	}
	time.Sleep(10 * time.Millisecond)
	if err := tables.Refresh(); err != nil {
		t.Fatal(err)
	}
	addPID(t, tables, p.PID())
	if s := tables.Stats(); s.Refused["rows full"] != 2 || s.Objects != 2 {
		t.Errorf("added after rows were freed: %+v, want libc tried (and refused) again", s)
	}
}

// PROBEKIT_CFI_ROWS sets the rows map's default size; a bad value is
// refused.
func TestRowsEnv(t *testing.T) {
	testkit.RequireKernel(t)
	t.Setenv(bpfunwind.RowsEnv, "5000")
	if s := newTables(t, nil).Stats(); s.RowCapacity != 5000 {
		t.Errorf("capacity %d", s.RowCapacity)
	}
	if s := newTables(t, &bpfunwind.Options{Rows: 7000}).Stats(); s.RowCapacity != 7000 {
		t.Errorf("Options.Rows and the environment: capacity %d", s.RowCapacity)
	}
	t.Setenv(bpfunwind.RowsEnv, "lots")
	if tb, err := bpfunwind.New(nil); err == nil || !strings.Contains(err.Error(), bpfunwind.RowsEnv) {
		if tb != nil {
			tb.Close()
		}
		t.Errorf("a bad $%s: %v", bpfunwind.RowsEnv, err)
	}
}

// The maps' kernel memory (memlock, from the kernel's fdinfo): the rows
// map's is RowSize bytes per row of Options.Rows, preallocated; a
// process's 8 KiB value is allocated when it is added. docs/trust.md
// quotes these numbers, and the rows of real objects (BenchmarkBuild).
func TestMemoryCost(t *testing.T) {
	tables := newTables(t, nil)
	total := uint64(0)
	for name, m := range tables.Replacements() {
		info, err := m.Info()
		if err != nil {
			t.Fatal(err)
		}
		mem, ok := info.Memlock()
		if !ok {
			testkit.Unavailable(t, "no memlock in the kernel's map info")
		}
		t.Logf("%s: %d entries of %d bytes, %d bytes of kernel memory", name, m.MaxEntries(), m.ValueSize(), mem)
		total += mem
		if name == bpfunwind.RowsMap {
			want := uint64(bpfunwind.DefaultRows * bpfunwind.RowSize)
			// Kernels without the maps' own memory accounting
			// (->map_mem_usage) print an estimate instead: the key and
			// value sizes together rounded up to 8 bytes, per entry.
			// Debian's 6.1 printed 16 MiB for these 8 MiB of rows;
			// 5.10 and 6.12 print the array's size.
			estimate := uint64(bpfunwind.DefaultRows) * uint64((m.KeySize()+m.ValueSize()+7)&^7)
			if (mem < want || mem > want+want/8) && mem != estimate {
				t.Errorf("rows map: %d bytes, want about %d (or the estimate %d)", mem, want, estimate)
			}
		}
	}
	t.Logf("total %d bytes (%.1f MiB)", total, float64(total)/(1<<20))
}
