package uprobe

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"

	"golang.org/x/arch/arm64/arm64asm"
	"golang.org/x/arch/x86/x86asm"
)

// SiteKind is what an instruction found by the scan does to control flow.
type SiteKind uint8

const (
	// Return is a return instruction (x86 RET/RET imm16 with any prefix,
	// arm64 RET/RETAA/RETAB): a return probe goes here.
	Return SiteKind = iota + 1
	// TailCall is a direct jump whose target lies outside the function:
	// the function returns through the callee's RET, so no return probe
	// of this function fires on that path.
	TailCall
	// IndirectJump is a jump through a register or memory: a tail call or
	// a jump table (switch); which one cannot be known from the code.
	IndirectJump
)

func (k SiteKind) String() string {
	switch k {
	case Return:
		return "return"
	case TailCall:
		return "tail call"
	case IndirectJump:
		return "indirect jump"
	}
	return fmt.Sprintf("SiteKind(%d)", uint8(k))
}

// Site is one control-flow exit of a function.
type Site struct {
	// Offset of the instruction from the function's first byte.
	Offset uint64
	Kind   SiteKind
	// Uncertain is true when the site was decoded after bytes the decoder
	// did not know (x86 only, where instructions have variable length):
	// it may be the middle of an instruction, and a breakpoint there
	// would corrupt the code. Attach refuses uncertain sites.
	Uncertain bool
}

// Gap is a run of bytes the decoder could not read.
type Gap struct {
	Offset, Len uint64
}

// Scan is the result of decoding one function.
type Scan struct {
	Sites []Site
	Gaps  []Gap
}

// Returns lists the offsets of the return instructions, and whether all
// of them are certain (no undecodable bytes came before any).
func (s *Scan) Returns() (offsets []uint64, certain bool) {
	certain = true
	for _, site := range s.Sites {
		if site.Kind == Return {
			offsets = append(offsets, site.Offset)
			certain = certain && !site.Uncertain
		}
	}
	return offsets, certain
}

// x86 CET end-branch markers. x86asm v0.33.0 decodes them as a 1-byte
// instruction with Op == 0 and no error, which would misalign everything
// after; they are 4 bytes (Intel SDM vol. 2A, ENDBR64/ENDBR32).
var (
	endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}
	endbr32 = []byte{0xf3, 0x0f, 0x1e, 0xfb}
)

// arm64 pointer-authenticated returns, which arm64asm v0.33.0 does not
// decode (Arm ARM C6.2, RETAA/RETAB: 0xd65f0bff, 0xd65f0fff).
const (
	arm64RETAA = 0xd65f0bff
	arm64RETAB = 0xd65f0fff
)

// ReturnSites decodes the machine code of one function (code[0] is its
// first byte) and lists its return instructions, tail calls and indirect
// jumps. The decoder follows machine, the target's ELF e_machine, never
// the host: EM_X86_64 and EM_386 (x86asm), EM_AARCH64 (arm64asm).
//
// Bytes the decoder does not know never fail the scan. On arm64 each
// instruction is one 4-byte word, so an unknown word is skipped and
// nothing after it is in doubt. On x86 the length of an unknown
// instruction is unknown too: the scan records a Gap, resumes at the next
// byte and keeps resuming byte by byte until an instruction decodes, and
// marks every site after the first gap Uncertain. Self-synchronisation
// usually realigns x86 decoding within a few instructions, but "usually"
// is not good enough for a breakpoint in someone's process, so attaching
// refuses uncertain sites while listing still shows them.
//
// An error means only that machine is not supported.
func ReturnSites(machine elf.Machine, code []byte) (*Scan, error) {
	s := &Scan{}
	switch machine {
	case elf.EM_X86_64:
		walkX86(code, 64, s.visit)
	case elf.EM_386:
		walkX86(code, 32, s.visit)
	case elf.EM_AARCH64:
		walkARM64(code, s.visit)
	default:
		return nil, fmt.Errorf("uprobe: no instruction decoder for %s (x86-64, i386 and arm64 are supported)", machine)
	}
	return s, nil
}

// insn is one decoded instruction, or a gap when n bytes were not
// decodable.
type insn struct {
	off, n    int
	gap       bool
	kind      SiteKind // 0 when the instruction is not an exit
	uncertain bool
}

func (s *Scan) visit(in insn) {
	switch {
	case in.gap:
		if l := len(s.Gaps); l > 0 && s.Gaps[l-1].Offset+s.Gaps[l-1].Len == uint64(in.off) {
			s.Gaps[l-1].Len += uint64(in.n)
		} else {
			s.Gaps = append(s.Gaps, Gap{Offset: uint64(in.off), Len: uint64(in.n)})
		}
	case in.kind != 0:
		s.Sites = append(s.Sites, Site{Offset: uint64(in.off), Kind: in.kind, Uncertain: in.uncertain})
	}
}

func walkX86(code []byte, mode int, visit func(insn)) {
	uncertain := false
	for i := 0; i < len(code); {
		rest := code[i:]
		if bytes.HasPrefix(rest, endbr64) || bytes.HasPrefix(rest, endbr32) {
			visit(insn{off: i, n: 4, uncertain: uncertain})
			i += 4
			continue
		}
		in, err := x86asm.Decode(rest, mode)
		if err != nil || in.Op == 0 || in.Len <= 0 {
			visit(insn{off: i, n: 1, gap: true})
			uncertain = true
			i++
			continue
		}
		if in.Op == x86asm.VZEROUPPER || in.Op == x86asm.VZEROALL {
			in.Len = vexZeroLen(rest, in.Len)
		}
		var kind SiteKind
		switch in.Op {
		case x86asm.RET:
			kind = Return
		case x86asm.JMP:
			switch arg := in.Args[0].(type) {
			case x86asm.Rel:
				if t := i + in.Len + int(arg); t < 0 || t >= len(code) {
					kind = TailCall
				}
			case x86asm.Reg, x86asm.Mem:
				kind = IndirectJump
			}
		}
		visit(insn{off: i, n: in.Len, kind: kind, uncertain: uncertain})
		i += in.Len
	}
}

// vexZeroLen corrects the length of VZEROUPPER/VZEROALL, which x86asm
// v0.33.0 overstates when a REX byte or another opcode follows (c5 f8 77
// then 48 31 c0 decodes as one 5-byte instruction), swallowing the next
// instruction and misaligning the scan silently. Both instructions have
// no operands: the VEX prefix (2 bytes c5, 3 bytes c4) plus opcode 77 is
// the whole instruction (Intel SDM vol. 2C, VZEROUPPER). Found by the
// objdump boundary test on Go's runtime.memeqbody.
func vexZeroLen(code []byte, decoded int) int {
	for i := 0; i < len(code) && i < decoded; i++ {
		switch code[i] {
		case 0xc5:
			if i+2 < len(code) && code[i+2] == 0x77 {
				return i + 3
			}
		case 0xc4:
			if i+3 < len(code) && code[i+3] == 0x77 {
				return i + 4
			}
		}
	}
	return decoded
}

func walkARM64(code []byte, visit func(insn)) {
	n := len(code) &^ 3
	for i := 0; i < n; i += 4 {
		word := binary.LittleEndian.Uint32(code[i:])
		if word == arm64RETAA || word == arm64RETAB {
			visit(insn{off: i, n: 4, kind: Return})
			continue
		}
		in, err := arm64asm.Decode(code[i : i+4])
		if err != nil {
			visit(insn{off: i, n: 4, gap: true})
			continue
		}
		var kind SiteKind
		switch in.Op {
		case arm64asm.RET:
			kind = Return
		case arm64asm.B:
			// B.cond is also Op B with a Cond argument first; only the
			// unconditional form leaves for good.
			if rel, ok := in.Args[0].(arm64asm.PCRel); ok {
				if t := int64(i) + int64(rel); t < 0 || t >= int64(len(code)) {
					kind = TailCall
				}
			}
		case arm64asm.BR:
			kind = IndirectJump
		}
		visit(insn{off: i, n: 4, kind: kind})
	}
	if n < len(code) {
		visit(insn{off: n, n: len(code) - n, gap: true})
	}
}

// instructionBoundary reports whether off starts an instruction when code
// is decoded from its first byte, with no undecodable byte before it.
func instructionBoundary(machine elf.Machine, code []byte, off uint64) bool {
	found, broken := false, false
	visit := func(in insn) {
		if broken || found {
			return
		}
		switch {
		case in.gap && machine != elf.EM_AARCH64:
			broken = true
		case uint64(in.off) == off && !in.gap:
			found = true
		}
	}
	switch machine {
	case elf.EM_X86_64:
		walkX86(code, 64, visit)
	case elf.EM_386:
		walkX86(code, 32, visit)
	case elf.EM_AARCH64:
		walkARM64(code, visit)
	}
	return found
}
