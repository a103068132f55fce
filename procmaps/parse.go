package procmaps

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/sys/unix"
)

// Why not procfs.Proc.ProcMaps: it splits lines with strings.Fields, so a
// path with a run of spaces comes back altered; one line it cannot parse
// fails the whole read; and it ignores the scanner's error, so an
// over-long line silently truncates the list. We read the same format
// ourselves, count the lines we cannot parse and keep going.

const (
	// maxLineLen bounds one maps line: the fixed prefix is at most
	// 16+1+16+1+4+1+16+1+8+1+8+1+20 = 94 bytes, the kernel pads it to
	// column 73, and d_path writes into one page (PATH_MAX, 4096),
	// followed by " (deleted)". Longer lines cannot come from the kernel;
	// they are skipped and counted as bad.
	maxLineLen = 8192

	// pageAlign: addresses and offsets in maps are page numbers shifted
	// by PAGE_SHIFT, and every Linux page size is a multiple of 4 KiB.
	pageAlign = 4096

	// deletedSuffix is what d_path appends for an unlinked file
	// (fs/d_path.c), memfd and SysV shared memory included.
	deletedSuffix = " (deleted)"
)

// Perms are a mapping's permissions, the "rwxp" column of maps.
type Perms uint8

const (
	Read   Perms = 1 << iota // r
	Write                    // w
	Exec                     // x
	Shared                   // s (MAP_SHARED); p (private) otherwise
)

// String formats perms as maps does ("r-xp").
func (p Perms) String() string {
	b := []byte("---p")
	if p&Read != 0 {
		b[0] = 'r'
	}
	if p&Write != 0 {
		b[1] = 'w'
	}
	if p&Exec != 0 {
		b[2] = 'x'
	}
	if p&Shared != 0 {
		b[3] = 's'
	}
	return string(b)
}

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	// Start and End bound the mapping's runtime addresses: [Start, End).
	Start, End uint64
	// Offset is the file offset mapped at Start (0 for anonymous memory).
	Offset uint64
	Perms  Perms
	// Dev is the device of the file in the st_dev encoding
	// (unix.Mkdev(major, minor)), so it compares with a Stat_t.Dev.
	Dev uint64
	// Inode is 0 for anonymous memory.
	Inode uint64
	// Path is the name as maps prints it, without a " (deleted)"
	// suffix: a file path as seen from the process's mount namespace,
	// or a pseudo name ("[vdso]", "[heap]", "[anon:NAME]", "anon_inode:…"),
	// or "" for anonymous memory. The kernel prints a newline in a name
	// as \012 and does not escape backslashes, so such names are
	// ambiguous; identity (Dev, Inode) is what counts.
	Path string
	// Deleted is set when maps marks the file " (deleted)": unlinked,
	// a memfd, or shared anonymous/SysV memory.
	Deleted bool
}

// Size is End - Start.
func (m *Mapping) Size() uint64 { return m.End - m.Start }

// FileBacked reports whether the mapping maps a file (a path, not a pseudo
// name or anonymous memory).
func (m *Mapping) FileBacked() bool {
	return m.Inode != 0 && strings.HasPrefix(m.Path, "/")
}

// ID is the identity of the mapped file.
func (m *Mapping) ID() FileID { return FileID{Dev: m.Dev, Inode: m.Inode} }

// holdsOffset reports whether file offset off is mapped by m.
func (m *Mapping) holdsOffset(off uint64) bool {
	return off >= m.Offset && off-m.Offset < m.Size()
}

// ParseLine parses one maps line (without its newline):
//
//	START-END PERMS OFFSET MAJOR:MINOR INODE [PADDING PATH]
//
// as fs/proc/task_mmu.c prints it: hexadecimal addresses, offset and
// device numbers, a decimal inode, then spaces up to a column and the
// name verbatim (spaces inside it kept). The error wraps ErrBadLine and
// names the field.
func ParseLine(line string) (Mapping, error) {
	m, rest, err := parseHeader(line)
	if err != nil {
		return Mapping{}, err
	}
	m.Path, m.Deleted = splitDeleted(rest)
	return m, nil
}

// parseHeader parses the fields before the path and returns the path
// text (padding removed).
func parseHeader(line string) (m Mapping, rest string, err error) {
	fail := func(field, why string) (Mapping, string, error) {
		return Mapping{}, "", fmt.Errorf("%w: %s: %s", ErrBadLine, field, why)
	}
	if len(line) > maxLineLen {
		return fail("line", "longer than any line the kernel writes")
	}
	var ok bool
	rest = line
	if m.Start, rest, ok = hexField(rest, '-'); !ok {
		return fail("start address", "want hexadecimal followed by '-'")
	}
	if m.End, rest, ok = hexField(rest, ' '); !ok {
		return fail("end address", "want hexadecimal followed by a space")
	}
	if m.Start >= m.End || m.Start%pageAlign != 0 || m.End%pageAlign != 0 {
		return fail("address range", "want page-aligned start < end")
	}
	rest = skipSpaces(rest)
	if m.Perms, ok = parsePerms(rest); !ok {
		return fail("permissions", `want four characters like "r-xp"`)
	}
	rest = skipSpaces(rest[4:])
	if m.Offset, rest, ok = hexField(rest, ' '); !ok {
		return fail("offset", "want hexadecimal")
	}
	if m.Offset%pageAlign != 0 || m.Offset > ^uint64(0)-m.Size() {
		return fail("offset", "want a page-aligned offset whose range does not overflow")
	}
	rest = skipSpaces(rest)
	var major, minor uint64
	if major, rest, ok = hexField(rest, ':'); !ok || major > 0xfff {
		return fail("device", "want MAJOR:MINOR in hexadecimal (major < 4096)")
	}
	if minor, rest, ok = hexField(rest, ' '); !ok || minor > 0xfffff {
		return fail("device", "want MAJOR:MINOR in hexadecimal (minor < 2^20)")
	}
	m.Dev = unix.Mkdev(uint32(major), uint32(minor))
	rest = skipSpaces(rest)
	// The inode is the last fixed field: it ends the line (anonymous
	// memory, possibly with a trailing space) or is followed by padding.
	end := strings.IndexByte(rest, ' ')
	if end < 0 {
		end = len(rest)
	}
	if m.Inode, ok = decimal(rest[:end]); !ok {
		return fail("inode", "want a decimal number")
	}
	return m, skipSpaces(rest[end:]), nil
}

// splitDeleted strips the " (deleted)" marker d_path appends.
func splitDeleted(path string) (string, bool) {
	if p, ok := strings.CutSuffix(path, deletedSuffix); ok && p != "" {
		return p, true
	}
	return path, false
}

// hexField reads hexadecimal digits up to sep (which must follow) and
// returns the text after sep.
func hexField(s string, sep byte) (uint64, string, bool) {
	var v uint64
	i := 0
	for ; i < len(s) && s[i] != sep; i++ {
		if i >= 16 { // more than 64 bits
			return 0, "", false
		}
		d, ok := hexDigit(s[i])
		if !ok {
			return 0, "", false
		}
		v = v<<4 | uint64(d)
	}
	if i == 0 || i == len(s) {
		return 0, "", false
	}
	return v, s[i+1:], true
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func decimal(s string) (uint64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

func parsePerms(s string) (Perms, bool) {
	if len(s) < 4 || (len(s) > 4 && s[4] != ' ') {
		return 0, false
	}
	var p Perms
	for i, set := range [3]struct {
		c    byte
		perm Perms
	}{{'r', Read}, {'w', Write}, {'x', Exec}} {
		switch s[i] {
		case set.c:
			p |= set.perm
		case '-':
		default:
			return 0, false
		}
	}
	switch s[3] {
	case 's':
		p |= Shared
	case 'p':
	default:
		return 0, false
	}
	return p, true
}

func skipSpaces(s string) string {
	for len(s) > 0 && s[0] == ' ' {
		s = s[1:]
	}
	return s
}

// ParseMaps parses a whole maps file. Lines it cannot parse (see
// ParseLine) are skipped and counted in bad; err reports only a failed
// read, with the lines read before it returned.
func ParseMaps(r io.Reader) (maps []Mapping, bad int, err error) {
	br := bufio.NewReaderSize(r, maxLineLen+1)
	// Many lines name the same file; keep one copy of each name.
	names := make(map[string]string)
	for {
		line, err := readLine(br)
		if len(line) > 0 {
			m, rest, perr := parseHeader(string(line))
			if perr != nil {
				bad++
			} else {
				path, deleted := splitDeleted(rest)
				if s, ok := names[path]; ok {
					path = s
				} else {
					// Clone: the name must not keep the whole line alive.
					path = strings.Clone(path)
					names[path] = path
				}
				m.Path, m.Deleted = path, deleted
				maps = append(maps, m)
			}
		}
		if errors.Is(err, errLineTooLong) {
			bad++
			continue
		}
		if err == io.EOF {
			return maps, bad, nil
		}
		if err != nil {
			return maps, bad, err
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its newline. A line longer
// than the reader's buffer is discarded and reported as errLineTooLong.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		for err == bufio.ErrBufferFull {
			_, err = br.ReadSlice('\n')
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		return nil, errLineTooLong
	}
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	return line, err
}
