// Package acllog parses the Ascend runtime's fault lines (aicore exception, MTE out of range, kernel_name,
// tensor index, addr, size, 507xxx codes): in msrun worker logs for doctor, and in aclGetRecentErrMsg for
// the agent. One parser for both.
//
// parse.go owns the log parser: it recognises the Ascend runtime's fault lines in msrun worker logs,
// whatever prefix the logger put in front of them, and groups nearby lines into fault records.
package acllog

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

	"swapagent/trace"
)

// Limits that keep the parser's memory bounded whatever the input (huge lines, endless faults).
const (
	// MaxLineBytes is the longest line prefix looked at; the rest of a longer line is skipped unread.
	MaxLineBytes = 64 << 10
	// maxRecords caps the fault records kept per log.
	maxRecords = 256
	// maxTensors caps the tensors kept per record.
	maxTensors = 64
	// maxCodes caps the distinct runtime error codes kept per record.
	maxCodes = 8
	// recordGap is how many lines without a fault field may separate two lines of one record: a Python
	// traceback sits between the runtime's lines and the RuntimeError that ends them.
	recordGap = 200
	// maxText caps free-text fields copied from a line.
	maxText = 256
)

// Tensor is one tensor the runtime dumped for the faulting kernel.
type Tensor struct {
	Index int     `json:"index"` // -1 when the log gave an address without an index
	Addr  *uint64 `json:"addr,omitempty"`
	Size  *uint64 `json:"size,omitempty"`
}

// Record is one fault as the log tells it: the fields found on a run of nearby lines.
type Record struct {
	Line          int      `json:"line"`      // first line (1-based)
	LastLine      int      `json:"last_line"` // last line that added a field
	AICore        bool     `json:"aicore_exception,omitempty"`
	VectorCore    bool     `json:"vector_core_exception,omitempty"`
	ErrorCode     string   `json:"error_code,omitempty"` // e.g. 0x800000
	ErrorStr      string   `json:"error_str,omitempty"`
	SubErrType    string   `json:"sub_err_type,omitempty"`
	RetCode       string   `json:"ret_code,omitempty"` // e.g. 0x26
	KernelName    string   `json:"kernel_name,omitempty"`
	Codes         []int    `json:"runtime_codes,omitempty"` // 507015, 507899, ...
	SyncFailed    bool     `json:"sync_failed,omitempty"`   // "Call runtime aclrtSynchronizeStream... error"
	PythonError   string   `json:"python_error,omitempty"`  // the RuntimeError line
	FailedOp      string   `json:"failed_op,omitempty"`     // "SyncStream failed for op aclnnMul" -> aclnnMul
	Tensors       []Tensor `json:"tensors,omitempty"`
	retFromTask   bool
	curTensor     int // index into Tensors that addr/size lines fill, -1 for none
	lastFieldLine int
}

var (
	reAICore     = regexp.MustCompile(`(?i)there is an? (aicore|aiv(?:ec)?|vector ?core) error exception`)
	reErrCode    = regexp.MustCompile(`(?i)(?:error ?code\s*[=:]\s*|errcode:\s*\(\s*)(0x[0-9a-f]+)`)
	reErrorStr   = regexp.MustCompile(`(?i)errorStr:\s*([^.,;]{1,200})`)
	reSubErr     = regexp.MustCompile(`(?i)subErrType\s*[:=]\s*(0x[0-9a-f]+|\d+)`)
	reRetCode    = regexp.MustCompile(`(?i)retCode\s*[=:]\s*(0x[0-9a-f]+|\d+)`)
	reKernelTask = regexp.MustCompile(`(?i)kernel task happen error`)
	reKernel     = regexp.MustCompile(`(?i)kernel_name\s*[=:]\s*([A-Za-z0-9_.\-]+)`)
	reTensorIdx  = regexp.MustCompile(`(?i)tensor index\s*[:=]\s*(\d+)`)
	reAddr       = regexp.MustCompile(`(?i)\baddr\s*[:=]\s*(0x[0-9a-f]+|\d+)`)
	reSize       = regexp.MustCompile(`(?i)\bsize\s*[:=]\s*(\d+)\s*bytes?\b`)
	reCode       = regexp.MustCompile(`\b(507011|507015|507035|507046|507053|507899)\b`)
	reSyncCall   = regexp.MustCompile(`(?i)call runtime (aclrtSynchronize\w*) error|(aclrtSynchronize\w*) failed`)
	rePyErr      = regexp.MustCompile(`RuntimeError:\s*(.*)`)
	reSyncOp     = regexp.MustCompile(`(?i)SyncStream failed for op (\w+)`)
	reSyncErr    = regexp.MustCompile(`(?i)sync stream error`)
)

// mteOutOfRange is the runtime's description of the null-address fault, also printed without "errorStr:".
const mteOutOfRange = "The DDR address of the MTE instruction is out of range"

// ParseLog reads one log and returns its fault records in order. Lines longer than MaxLineBytes are
// cut; at most maxRecords records are kept. The error is the reader's, never the content's.
func ParseLog(r io.Reader) ([]Record, error) {
	p := parser{}
	br := bufio.NewReaderSize(r, 4096)
	buf := make([]byte, 0, 1024)
	for {
		line, err := readLine(br, buf[:0])
		buf = line[:0]
		if len(line) > 0 || err == nil {
			p.line(string(line))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			p.flush()
			return p.out, err
		}
	}
	p.flush()
	return p.out, nil
}

// readLine returns the next line without its newline, cut to MaxLineBytes; io.EOF after the last one.
func readLine(br *bufio.Reader, dst []byte) ([]byte, error) {
	for {
		frag, err := br.ReadSlice('\n')
		if room := MaxLineBytes - len(dst); room > 0 {
			if len(frag) > room {
				dst = append(dst, frag[:room]...)
			} else {
				dst = append(dst, frag...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue // keep reading (and dropping past the cap) until the line ends
		}
		dst = bytes.TrimRight(dst, "\r\n")
		if err == io.EOF && len(dst) == 0 {
			return dst, io.EOF
		}
		if err == io.EOF {
			return dst, nil // last line without newline; next call gives EOF
		}
		return dst, err
	}
}

type parser struct {
	n   int
	cur *Record
	out []Record
}

func (p *parser) flush() {
	if p.cur != nil {
		if len(p.out) < maxRecords {
			p.out = append(p.out, *p.cur)
		}
		p.cur = nil
	}
}

// open returns the record a start marker belongs to: the current one when it is near, else a new one.
func (p *parser) open() *Record {
	if p.cur != nil && p.n-p.cur.lastFieldLine > recordGap {
		p.flush()
	}
	if p.cur == nil {
		p.cur = &Record{Line: p.n, curTensor: -1}
	}
	return p.cur
}

func (p *parser) touch(r *Record) {
	r.lastFieldLine = p.n
	r.LastLine = p.n
}

func (p *parser) line(s string) {
	p.n++
	// Cheap pre-filter: every field we look for contains one of these words.
	ls := strings.ToLower(s)
	if !strings.Contains(ls, "error") && !strings.Contains(ls, "kernel") && !strings.Contains(ls, "tensor") &&
		!strings.Contains(ls, "addr") && !strings.Contains(ls, "size") && !strings.Contains(ls, "5070") &&
		!strings.Contains(ls, "mte") {
		return
	}

	// A different kernel name means a different fault.
	if m := reKernel.FindStringSubmatch(s); m != nil {
		name := clip(m[1])
		if p.cur != nil && p.cur.KernelName != "" && p.cur.KernelName != name {
			p.flush()
		}
		r := p.open()
		r.KernelName = name
		p.touch(r)
	}
	if m := reAICore.FindStringSubmatch(s); m != nil {
		r := p.open()
		if strings.HasPrefix(strings.ToLower(m[1]), "aicore") {
			r.AICore = true
		} else {
			r.VectorCore = true
		}
		p.touch(r)
	}
	if m := reErrCode.FindStringSubmatch(s); m != nil {
		r := p.open()
		if r.ErrorCode == "" {
			r.ErrorCode = strings.ToLower(m[1])
		}
		p.touch(r)
	}
	if m := reErrorStr.FindStringSubmatch(s); m != nil {
		r := p.open()
		if r.ErrorStr == "" {
			r.ErrorStr = clip(strings.TrimSpace(m[1]))
		}
		p.touch(r)
	} else if strings.Contains(s, mteOutOfRange) {
		r := p.open()
		if r.ErrorStr == "" {
			r.ErrorStr = mteOutOfRange
		}
		p.touch(r)
	}
	kernelTask := reKernelTask.MatchString(s)
	if kernelTask {
		r := p.open()
		r.AICore = r.AICore || strings.Contains(ls, "aicore")
		p.touch(r)
	}
	// The kernel task's retCode is the one that names the fault (0x26); a stream's may come first.
	if m := reRetCode.FindStringSubmatch(s); m != nil && (kernelTask || p.cur != nil) {
		r := p.open()
		if r.RetCode == "" || kernelTask && !r.retFromTask {
			r.RetCode = strings.ToLower(m[1])
			r.retFromTask = kernelTask
		}
		p.touch(r)
	}
	for _, m := range reCode.FindAllStringSubmatch(s, maxCodes) {
		r := p.open()
		c, _ := strconv.Atoi(m[1])
		r.addCode(c)
		p.touch(r)
	}
	if reSyncCall.MatchString(s) {
		r := p.open()
		r.SyncFailed = true
		p.touch(r)
	}
	if m := rePyErr.FindStringSubmatch(s); m != nil && (reSyncOp.MatchString(s) || reSyncErr.MatchString(s)) {
		r := p.open()
		if r.PythonError == "" {
			r.PythonError = clip(strings.TrimSpace(m[0]))
		}
		if om := reSyncOp.FindStringSubmatch(s); om != nil && r.FailedOp == "" {
			r.FailedOp = clip(om[1])
		}
		p.touch(r)
	}

	// Continuation fields only count inside an open record.
	r := p.cur
	if r == nil || p.n-r.lastFieldLine > recordGap {
		return
	}
	if m := reSubErr.FindStringSubmatch(s); m != nil {
		if r.SubErrType == "" {
			r.SubErrType = m[1]
		}
		p.touch(r)
	}
	if m := reTensorIdx.FindStringSubmatch(s); m != nil {
		idx, err := strconv.Atoi(m[1])
		if err != nil {
			idx = -1
		}
		r.selectTensor(idx)
		p.touch(r)
	}
	if m := reAddr.FindStringSubmatch(s); m != nil {
		if v, ok := trace.ParseUint(m[1]); ok {
			t := r.tensorForField()
			if t != nil && t.Addr == nil {
				t.Addr = &v
			}
			p.touch(r)
		}
	}
	if m := reSize.FindStringSubmatch(s); m != nil {
		if v, ok := trace.ParseUint(m[1]); ok {
			t := r.tensorForField()
			if t != nil && t.Size == nil {
				t.Size = &v
			}
			p.touch(r)
		}
	}
}

func (r *Record) addCode(c int) {
	for _, have := range r.Codes {
		if have == c {
			return
		}
	}
	if len(r.Codes) < maxCodes {
		r.Codes = append(r.Codes, c)
	}
}

// selectTensor makes the tensor with this index current, adding it when new (repeated dumps merge).
func (r *Record) selectTensor(idx int) {
	for i := range r.Tensors {
		if r.Tensors[i].Index == idx {
			r.curTensor = i
			return
		}
	}
	if len(r.Tensors) >= maxTensors {
		r.curTensor = -1
		return
	}
	r.Tensors = append(r.Tensors, Tensor{Index: idx})
	r.curTensor = len(r.Tensors) - 1
}

// tensorForField returns the tensor an addr/size line describes; one with index -1 when none was named.
func (r *Record) tensorForField() *Tensor {
	if r.curTensor < 0 || r.curTensor >= len(r.Tensors) {
		r.selectTensor(-1)
		if r.curTensor < 0 {
			return nil
		}
	}
	return &r.Tensors[r.curTensor]
}

func clip(s string) string {
	if len(s) > maxText {
		return s[:maxText]
	}
	return s
}

// KernelOp returns the operator a kernel name belongs to: the part before the first underscore that
// starts a long hex hash ("Mul_ee98..._high_performance" -> "Mul"), or the whole name.
func KernelOp(kernel string) string {
	parts := strings.Split(kernel, "_")
	for i := 1; i < len(parts); i++ {
		if isHash(parts[i]) {
			return strings.Join(parts[:i], "_")
		}
	}
	return kernel
}

func isHash(s string) bool {
	if len(s) < 8 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
