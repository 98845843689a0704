package signature

import (
	"regexp"
	"strconv"
	"strings"
)

// analysis is what the text of one stderr shows, before the exit status is
// taken into account (see Parse).
type analysis struct {
	// sig is the failure the text shows; Family is "" when none.
	sig Signature
	// abortClass, abortKernel and abortExpr describe the C++ exception (or
	// glibc host assert) that aborted the process, when one was printed and
	// it said nothing more specific.
	abortClass, abortKernel, abortExpr string
	// childSignal is the signal a torchrun or torch.multiprocessing parent
	// reports for its child, or 0.
	childSignal int
	// backend is what the text's markers alone say (see Parse), or "".
	backend string
}

// maxParse bounds the text Parse reads: beyond it, the head (where the first
// assert is) and the tail (where the last traceback is) are kept. The
// Runner's default capture (1 MiB) is below it.
const maxParse = 2 << 20

type assertHit struct {
	path, kernel, expr string
	hip                bool
}

type excHit struct {
	class string
	msg   string   // the message's first line
	cont  []string // following lines (bounded)
	frame string   // function of the innermost frame under torch's functional modules, or ""
	// wrapper: a launcher exception that only reports a child's failure.
	wrapper bool
}

var (
	cudaAssertRe = regexp.MustCompile("(\\S+?):(\\d+): (?:(.*?): )?block: \\[[\\d, ]*\\], thread: \\[[\\d, ]*\\] Assertion `(.*?)` failed")
	hipAssertRe  = regexp.MustCompile("(\\S+?):(\\d+): (?:(.*?): )?Device-side assertion `(.*?)' failed")
	// assertHeadRe is the start of a CUDA assert line, "<path>:<line>:
	// <kernel>: block: [", wherever it is in a line (threads printing at
	// once cut and mix their lines).
	assertHeadRe = regexp.MustCompile(`(\S+?):(\d+): (?:(.*?): )?block: \[`)
	// idTailRe is the end of a block or thread id list that starts a
	// line, the rest of an assert line cut by another thread's output.
	idTailRe = regexp.MustCompile(`^[\d,: ]*\] ?$`)
	// garbageTailRe is another thread's block or thread id, path or kernel
	// glued to the end of an expression ("...\"index out of bounds\",0,0",
	// "...,0/pytorch/.../ScatterGatherKernel.cu", "...,0: block: [0"): no
	// expression ends with a comma and a number.
	garbageTailRe = regexp.MustCompile(`(?:,\d+)+(?:[:/ ].*)?$`)
	// inductorMsgRe is the message of Inductor's generated bounds assert.
	inductorMsgRe = regexp.MustCompile(`^index out of bounds: \d+ <= tmp\d+ < `)
	// deviceFileRe finds a device source file in a fragment.
	deviceFileRe = regexp.MustCompile(`[\w.~+@$/\\-]*[\w-]\.(?:cuh?|hip)\b`)
	// Where THC and c10 say an error was raised: "cuda runtime error (59)
	// : device-side assert triggered at <file>:<line>" (THC,
	// aten/src/THC/THCGeneral.cpp's __THCudaCheck, <= 1.4), "THCudaCheck
	// FAIL file=<file> line=<line> error=59 : ..." (the same, as a warning),
	// "Exception raised from <fn> at <file>:<line>" (c10::Error, 1.6+).
	raisedAtRe     = regexp.MustCompile(`(?:device-side assert triggered at |THCudaCheck FAIL file=|Exception raised from \S+ at )(\S+?\.(?:cuh?|hip))\b`)
	cublasStatusRe = regexp.MustCompile(`\b(?:CU|HIP)BLAS_STATUS_[A-Z_]+|\brocblas_status_[a-z_]+`)
	cudnnStatusRe  = regexp.MustCompile(`\bCUDNN_STATUS_[A-Z_]+|\bmiopenStatus[A-Za-z]+`)
	// thcErrorRe is THC's form of a CUDA runtime error (THCGeneral.cpp's
	// __THCudaCheck, <= 1.4): "cuda runtime error (9) : invalid
	// configuration argument at /pytorch/aten/src/THC/...cu:NN".
	thcErrorRe = regexp.MustCompile(`cuda runtime error \((\d+)\) : (.*?)(?: at \S+)?$`)
	// atenErrorRe is ATen's (c10/cuda/CUDAException.h, 1.x and 2.x): "CUDA
	// error: invalid configuration argument"; HIP builds say "HIP error:".
	atenErrorRe = regexp.MustCompile(`\b(?:CUDA|HIP) error: (.*?)\s*$`)
	// thcCublasRe is THC's cuBLAS error (THCGeneral.cpp's __THCublasCheck,
	// <= 1.4): "cublas runtime error : <message> at <file>:<line>".
	thcCublasRe   = regexp.MustCompile(`cublas runtime error : (.*?)(?: at \S+)?$`)
	hostAssertRe  = regexp.MustCompile("(\\S+?):(\\d+): (?:(.*?): )?Assertion `(.*)' failed")
	excLineRe     = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?:: ?(.*))?$`)
	bareExcRe     = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:Error|Exception)): (.*\S.*)$`)
	frameRe       = regexp.MustCompile(`^\s+File "(.*)", line \d+, in (\S+)`)
	terminateRe   = regexp.MustCompile(`terminate called after throwing an instance of '([^']+)'`)
	whatRe        = regexp.MustCompile(`^\s*what\(\):\s*(.*)$`)
	childSigNumRe = regexp.MustCompile(`Signal (\d+) \((SIG[A-Z0-9]+)\) received by PID`)
	childSigName  = regexp.MustCompile(`(?:terminated with signal |died with <Signals\.)(SIG[A-Z0-9]+)`)
	childExitRe   = regexp.MustCompile(`exitcode\s*:\s*-(\d+)\b`)
	methodRe      = regexp.MustCompile(`in method (\w+)`)
	anomalyFnRe   = regexp.MustCompile(`Function '([^']+)' returned nan values`)
	nonFiniteRe   = regexp.MustCompile(`(?i)\b(?:nans?|infs?|infinity|non-?finite|not finite|is infinite|isfinite|isnan|isinf)\b`)
	memFaultRe    = regexp.MustCompile(`Memory access fault by GPU node-\d+.*?Reason: (.*)$`)
	inductorIdxRe = regexp.MustCompile(`_\d+$`)
	cudaFileRe    = regexp.MustCompile(`\.cuh?:\d|\bcuda:\d`)
)

// wrapperExceptions only report that a child failed; the child's own
// traceback, printed before, says how.
var wrapperExceptions = map[string]bool{
	"ChildFailedError":       true, // torch.distributed.elastic (torchrun)
	"ProcessExitedException": true, // torch.multiprocessing.spawn
	"ProcessRaisedException": true, // torch.multiprocessing.spawn
	"CalledProcessError":     true, // subprocess.check_call and friends
}

func lastComponent(class string) string {
	if i := strings.LastIndex(class, "."); i >= 0 {
		return class[i+1:]
	}
	return class
}

// cleanLine prepares one raw line: no ANSI colours, carriage returns, rank
// prefixes or trailing space; leading indentation is kept (tracebacks need
// it).
func cleanLine(l string) string {
	if strings.IndexByte(l, 0x1b) >= 0 {
		l = ansiRe.ReplaceAllString(l, "")
	}
	l = strings.TrimRight(l, " \t\r")
	return stripRankPrefix(l)
}

// splitFrameEndRe ends a traceback's frame line, which a newline in the
// path of its file (a repository's) splits: Python prints the path as it
// is.
var splitFrameEndRe = regexp.MustCompile(`", line \d+(?:, in \S+)?$`)

// maxFrameSplit is the most lines one frame line is joined from.
const maxFrameSplit = 5

// joinFrames returns lines (raw) with every frame line of a traceback
// that newlines in its file's path split joined again, cleaned, each
// newline written as the two characters \n: its pieces are then read
// neither as an exception's line nor as a frame's source, and the frame is
// kept. A piece is never blank nor a traceback's head. It returns lines
// itself when none is split.
func joinFrames(lines []string) []string {
	var out []string
	for i := 0; i < len(lines); i++ {
		end := -1
		if strings.Contains(lines[i], `File "`) {
			l := cleanLine(lines[i])
			if t := strings.TrimLeft(l, " \t"); t != l && strings.HasPrefix(t, `File "`) && !splitFrameEndRe.MatchString(l) {
				for j := i + 1; j < len(lines) && j < i+maxFrameSplit; j++ {
					p := cleanLine(lines[j])
					if p == "" || strings.HasPrefix(p, "Traceback (most recent call last):") {
						break
					}
					if splitFrameEndRe.MatchString(p) {
						end = j
						break
					}
				}
			}
		}
		if end < 0 {
			if out != nil {
				out = append(out, lines[i])
			}
			continue
		}
		if out == nil {
			out = append(make([]string, 0, len(lines)), lines[:i]...)
		}
		parts := make([]string, 0, end+1-i)
		for _, p := range lines[i : end+1] {
			parts = append(parts, cleanLine(p))
		}
		out = append(out, strings.Join(parts, `\n`))
		i = end
	}
	if out == nil {
		return lines
	}
	return out
}

func analyze(stderr []byte) analysis {
	text := string(stderr)
	if len(text) > maxParse {
		text = text[:maxParse/2] + "\n" + text[len(text)-maxParse/2:]
	}
	lines := joinFrames(strings.Split(text, "\n"))

	var (
		a            analysis
		first        *assertHit
		hostAssert   *assertHit
		excs         []*excHit
		cur          *excHit // the traceback being read
		inFrames     bool
		bareClass    string
		bareMsg      string
		abortClass   string
		abortWhat    string
		abortPending bool
		markerLine   string
		head         *assertHit // a cut assert line's start, "<path>:<line>: <kernel>: block: [..."
		raisedAt     string     // a device file that THC or c10 says raised the error
		hasTriton    bool
		hasHIP       bool
		hasCUDA      bool
	)
	for _, raw := range lines {
		l := cleanLine(raw)
		if l == "" {
			if cur != nil && !inFrames && len(cur.cont) < 50 {
				cur.cont = append(cur.cont, "")
			}
			continue
		}
		// Backend markers.
		if !hasTriton && strings.Contains(l, "Triton Error") {
			hasTriton = true
		}
		if !hasHIP && (strings.Contains(l, "HIP error") || strings.Contains(l, "hipError") || strings.Contains(l, "HIP out of memory") ||
			strings.Contains(l, ".hip:") || strings.Contains(l, "/hip/") || strings.Contains(l, "Memory access fault by GPU") ||
			strings.Contains(l, "AMD_SERIALIZE_KERNEL") || strings.Contains(l, "HIP_LAUNCH_BLOCKING") ||
			strings.Contains(l, "TORCH_USE_HIP_DSA") || strings.Contains(l, "HIP kernel errors")) {
			hasHIP = true
		}
		if !hasCUDA && (strings.Contains(l, "CUDA error") || strings.Contains(l, "cuda runtime error") || strings.Contains(l, "CUDA out of memory") ||
			strings.Contains(l, "CUDA kernel errors") || strings.Contains(l, "CUDA_LAUNCH_BLOCKING") || strings.Contains(l, "wrapper_CUDA") ||
			strings.Contains(l, "THCudaCheck") || strings.Contains(l, "cudaError") || strings.Contains(l, "cuDNN error") ||
			strings.Contains(l, "CUBLAS_STATUS_") || strings.Contains(l, "CUDNN_STATUS_") || strings.Contains(l, "cublas runtime error") ||
			((strings.Contains(l, ".cu") || strings.Contains(l, "cuda:")) && cudaFileRe.MatchString(l))) {
			hasCUDA = true
		}

		if raisedAt == "" && (strings.Contains(l, " at ") || strings.Contains(l, "file=")) {
			if m := raisedAtRe.FindStringSubmatch(l); m != nil && knownFile(m[1]) {
				raisedAt = m[1]
			}
		}

		// Device asserts: the first one wins.
		if strings.Contains(l, "ssertion `") {
			if first != nil && (strings.Contains(l, "block: [") || strings.Contains(l, "thread: [") || strings.Contains(l, "Device-side assertion `")) {
				continue // the spam of the other failing threads
			}
			if h := matchAssert(l, head); h != nil {
				if first == nil {
					first = h
				}
				continue
			}
			if hostAssert == nil {
				if m := hostAssertRe.FindStringSubmatch(l); m != nil {
					hostAssert = &assertHit{path: m[1], kernel: cleanKernel(m[3]), expr: normalizeExpression(m[4])}
				}
			}
		}

		if first == nil && head == nil && strings.Contains(l, "block: [") {
			// The start of an assert line whose rest another thread's
			// output cut off.
			if m := assertHeadRe.FindStringSubmatch(l); m != nil {
				head = &assertHit{path: m[1], kernel: cleanKernel(m[3])}
			}
		}

		// C++ terminate.
		if strings.Contains(l, "terminate called") {
			if m := terminateRe.FindStringSubmatch(l); m != nil {
				if abortClass == "" {
					abortClass, abortPending = m[1], true
				}
				continue
			}
			if strings.Contains(l, "terminate called without an active exception") && abortClass == "" {
				abortClass, abortWhat = "std::terminate", "terminate called without an active exception"
				continue
			}
		}
		if abortPending {
			if m := whatRe.FindStringSubmatch(l); m != nil {
				abortWhat = m[1]
				abortPending = abortWhat == ""
				continue
			}
			if abortWhat == "" && !strings.HasPrefix(l, " ") {
				abortWhat, abortPending = strings.TrimSpace(l), false
			}
		}

		// Child signals reported by launchers.
		if a.childSignal == 0 && (strings.Contains(l, "received by PID") || strings.Contains(l, "terminated with signal") ||
			strings.Contains(l, "died with <Signals.") || strings.Contains(l, "exitcode")) {
			if m := childSigNumRe.FindStringSubmatch(l); m != nil {
				a.childSignal, _ = strconv.Atoi(m[1])
			} else if m := childSigName.FindStringSubmatch(l); m != nil {
				a.childSignal = signalNumber(m[1])
			} else if m := childExitRe.FindStringSubmatch(l); m != nil {
				a.childSignal, _ = strconv.Atoi(m[1])
			}
		}

		// Python tracebacks.
		if strings.HasPrefix(l, "Traceback (most recent call last):") {
			cur, inFrames = &excHit{}, true
			continue
		}
		if cur != nil && inFrames {
			if l[0] == ' ' || l[0] == '\t' {
				if m := frameRe.FindStringSubmatch(l); m != nil {
					cur.frame = ""
					if isFunctionalModule(m[1]) {
						cur.frame = m[2]
					}
				}
				continue
			}
			if m := excLineRe.FindStringSubmatch(l); m != nil {
				cur.class, cur.msg = m[1], strings.TrimSpace(m[2])
				cur.wrapper = wrapperExceptions[lastComponent(cur.class)]
				excs = append(excs, cur)
				inFrames = false
			}
			continue
		}
		if cur != nil {
			if strings.HasPrefix(l, "During handling of the above exception") || strings.HasPrefix(l, "The above exception was the direct cause") {
				cur = nil
				continue
			}
			if len(cur.cont) < 50 {
				cur.cont = append(cur.cont, l)
			}
			continue
		}
		if isIdentStart(l[0]) && strings.Contains(l, ": ") {
			if m := bareExcRe.FindStringSubmatch(l); m != nil {
				bareClass, bareMsg = m[1], strings.TrimSpace(m[2])
				continue
			}
		}
		if markerLine == "" && hasMarker(l) {
			markerLine = l
		}
	}

	backend := func() string {
		switch {
		case hasTriton:
			return BackendTriton
		case hasHIP:
			return BackendHIP
		case hasCUDA:
			return BackendCUDA
		}
		return ""
	}

	a.backend = backend()

	// The exception of the last traceback that is not a launcher's wrapper.
	var exc *excHit
	for i := len(excs) - 1; i >= 0; i-- {
		if !excs[i].wrapper {
			exc = excs[i]
			break
		}
	}

	if first == nil && head != nil {
		// Only the start of an assert line survived: the kernel and its
		// file, not the expression.
		first = head
	}
	if first != nil {
		s := Signature{Family: FamilyDeviceAssert, Kernel: first.kernel, Expression: first.expr}
		if s.Expression == "" {
			s.File = baseName(first.path)
		}
		switch {
		case hasTriton || isTritonAssert(first):
			s.Backend = BackendTriton
		case first.hip || hasHIP:
			s.Backend = BackendHIP
		default:
			s.Backend = BackendCUDA
		}
		switch {
		case exc != nil:
			s.Exception = exc.class
		case abortClass != "":
			s.Exception = abortClass
		case bareClass != "":
			s.Exception = bareClass
		}
		a.sig = s
		return a
	}

	var fromExc, fromAbort Signature
	if exc != nil {
		msg := exc.msg
		if msg == "" {
			for _, c := range exc.cont {
				if c = strings.TrimSpace(c); c != "" {
					msg = c
					break
				}
			}
		}
		fromExc = classify(exc.class, msg)
		fromExc.Exception = exc.class
		if fromExc.Family == FamilyHostCheck && fromExc.Kernel == "" {
			fromExc.Kernel = exc.frame
		}
	}
	if abortClass != "" {
		fromAbort = classify(abortClass, abortWhat)
		fromAbort.Exception = abortClass
		if fromAbort.Family == FamilyHostCheck {
			a.abortClass, a.abortExpr = abortClass, fromAbort.Expression
		}
	} else if hostAssert != nil {
		a.abortClass, a.abortKernel = "assert", hostAssert.kernel
		a.abortExpr = "Assertion `" + hostAssert.expr + "' failed."
	}
	specific := func(s Signature) bool { return s.Family != "" && s.Family != FamilyHostCheck }
	switch {
	case specific(fromExc):
		a.sig = fromExc
	case specific(fromAbort):
		a.sig = fromAbort
	case fromExc.Family != "":
		a.sig = fromExc
	case fromAbort.Family != "":
		a.sig = fromAbort
	case bareClass != "":
		a.sig = classify(bareClass, bareMsg)
		a.sig.Exception = bareClass
	case markerLine != "":
		if s := classify("", markerLine); specific(s) {
			a.sig = s
		}
	}
	if a.sig.Family == "" {
		return a
	}
	if a.sig.Backend == "" {
		a.sig.Backend = a.backend
	}
	if a.sig.Family == FamilyDeviceAssert && raisedAt != "" {
		// No assert line: the file THC or c10 names says which asserts it
		// can be (Classes).
		a.sig.File = baseName(raisedAt)
	}
	switch a.sig.Family {
	case FamilyHostCheck, FamilyNaNAnomaly, FamilyDeviceMismatch:
		if a.sig.Backend == "" {
			a.sig.Backend = BackendCPU // no accelerator marker: a host exception
		}
	}
	return a
}

func isIdentStart(c byte) bool { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// matchAssert reads a device assert line, or what is left of one that
// threads printing at once cut and mixed (recoverAssert); head is the
// start of an assert line cut off earlier, or nil.
func matchAssert(l string, head *assertHit) *assertHit {
	if m := cudaAssertRe.FindStringSubmatch(l); m != nil && !garbled(m[3]) && !garbledPath(m[1]) {
		return &assertHit{path: m[1], kernel: cleanKernel(m[3]), expr: normalizeExpression(m[4]),
			hip: strings.Contains(m[1], ".hip") || strings.Contains(m[1], "/hip/")}
	}
	if m := hipAssertRe.FindStringSubmatch(l); m != nil && !garbled(m[3]) {
		return &assertHit{path: m[1], kernel: cleanKernel(m[3]), expr: normalizeExpression(m[4]), hip: true}
	}
	return recoverAssert(l, head)
}

// garbled reports whether a kernel taken from an assert line holds pieces
// of another thread's line.
func garbled(kernel string) bool {
	return strings.Contains(kernel, "block: [") || strings.Contains(kernel, "thread: [") ||
		strings.Contains(kernel, "Assertion") || strings.Contains(kernel, ".cu:") || strings.Contains(kernel, ".hip:")
}

// garbledPath reports whether a path taken from an assert line starts with
// another thread's block or thread id (",0,0/pytorch/...").
func garbledPath(path string) bool {
	return strings.ContainsAny(path, "[]") || strings.HasPrefix(path, ",")
}

// recoverAssert reassembles a CUDA assert line that concurrent threads cut
// and mixed, such as
//
//	/pytorch/.../ScatterGatherKernel.cu:312: operator(): block: [3,0,0/pytorch/.../ScatterGatherKernel.cu:312: operator(): block: [3,0,0], thread: [60,0,0] Assertion `...` failed.
//	,0,0], thread: [60,0:115,0] Assertion `...` failed.
//
// The expression is the text between "Assertion `" and the first "`
// failed" after it; the kernel and file are those of the last intact
// "<path>:<line>: <kernel>: block: [" before it, else of head (the start of
// the line, printed earlier), else the file is any device source file the
// fragment names. A fragment is a device assert only if it shows a block or
// thread id or a device file before the expression.
func recoverAssert(l string, head *assertHit) *assertHit {
	i := strings.Index(l, "Assertion `")
	if i < 0 {
		return nil
	}
	rest := l[i+len("Assertion `"):]
	end := strings.Index(rest, "` failed")
	if end < 0 {
		return nil
	}
	pre := l[:i]
	file := deviceFileRe.FindString(pre)
	if !strings.Contains(pre, "thread: [") && !strings.Contains(pre, "block: [") && file == "" && !idTailRe.MatchString(pre) {
		return nil
	}
	h := &assertHit{expr: normalizeExpression(garbageTailRe.ReplaceAllString(rest[:end], ""))}
	if ms := assertHeadRe.FindAllStringSubmatchIndex(pre, -1); len(ms) > 0 {
		m := ms[len(ms)-1]
		h.path = pre[m[2]:m[3]]
		if m[6] >= 0 && !garbled(pre[m[6]:m[7]]) {
			h.kernel = cleanKernel(pre[m[6]:m[7]])
		}
	} else if head != nil {
		h.path, h.kernel = head.path, head.kernel
	}
	if h.path == "" || !deviceFileRe.MatchString(h.path) {
		if file != "" {
			h.path = file
		}
	}
	if f := deviceFileRe.FindString(h.path); f != "" {
		h.path = f // a path glued to another thread's block id
	}
	h.hip = strings.Contains(h.path, ".hip") || strings.Contains(h.path, "/hip/")
	return h
}

// baseName is a path's last element.
func baseName(path string) string {
	if i := strings.LastIndexAny(path, `/\`); i >= 0 {
		return path[i+1:]
	}
	return path
}

func isTritonAssert(h *assertHit) bool {
	return h.path == "unknown" || strings.Contains(h.path, "torchinductor_") || strings.HasPrefix(h.kernel, "triton_")
}

// isFunctionalModule reports whether a traceback frame's file is one of the
// torch modules whose function names are op names.
func isFunctionalModule(path string) bool {
	p := strings.ReplaceAll(path, `\`, "/")
	return strings.HasSuffix(p, "torch/nn/functional.py") || strings.HasSuffix(p, "torch/functional.py")
}

// markers are substrings that make a line outside any traceback worth
// classifying on its own.
var markers = []string{
	"Memory access fault by GPU", "CUDA error", "HIP error", "cuda runtime error", "Triton Error",
	"out of memory", "DefaultCPUAllocator", "std::bad_alloc", "returned nan values",
	"Expected all tensors to be on the same device", "can't open file", "device-side assert",
	"illegal memory access", "unspecified launch failure", "misaligned address",
	"CUBLAS_STATUS_", "CUDNN_STATUS_", "cublas runtime error", "cuDNN error", "index out of bounds: ",
}

func hasMarker(l string) bool {
	if strings.Contains(l, "Warning:") {
		return false // warnings are not failures ("UserWarning: CUDA initialization: ...")
	}
	for _, m := range markers {
		if strings.Contains(l, m) {
			return true
		}
	}
	return false
}

var infraClasses = map[string]bool{
	"ModuleNotFoundError": true, "ImportError": true, "SyntaxError": true,
	"IndentationError": true, "TabError": true, "KeyboardInterrupt": true,
}

// infraMessages mean the environment cannot run the replay at all.
var infraMessages = []string{
	"no CUDA GPUs are available", "Found no NVIDIA driver", "Torch not compiled with CUDA enabled",
	"no kernel image is available for execution on the device", "CUDA driver version is insufficient",
	"no CUDA-capable device is detected", "busy or unavailable", "no ROCm-capable device",
	"CUDA driver initialization failed", "can't open file",
}

// deviceOOMMessages are the texts of a device allocator that ran out:
// "CUDA out of memory. Tried to allocate ..." (c10/cuda/CUDACachingAllocator.cpp,
// 1.x and 2.x), "HIP out of memory" (its hipified copy), THC's "cuda
// runtime error (2) : out of memory at .../THCCachingAllocator.cpp" or
// ".../THCGeneral.cpp" (aten/src/THC/THCGeneral.cpp's __THCudaCheck,
// <= 1.4; "THCudaCheck FAIL ... error=2 : out of memory" as a warning),
// "CUDA error: out of memory" (a cudaMalloc outside the caching
// allocator). cuBLAS's and cuDNN's ALLOC_FAILED are their own families'
// (cublas_error, cudnn_error): cublasCreate fails so when the context or
// driver is broken as often as when memory is short.
var deviceOOMMessages = []string{
	"CUDA out of memory", "HIP out of memory", "CUDA error: out of memory", "HIP error: out of memory",
	"runtime error (2) : out of memory", "error=2 : out of memory", "cudaErrorMemoryAllocation", "hipErrorOutOfMemory",
	"MPS backend out of memory", "XPU out of memory",
}

// hostOOMMessages are the CPU allocator's: "DefaultCPUAllocator: can't
// allocate memory: you tried to allocate N bytes" (c10/core/impl/alloc_cpu.cpp,
// 1.x and 2.x), "DefaultCPUAllocator: not enough memory" (its Windows
// form), std::bad_alloc.
var hostOOMMessages = []string{"DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory",
	"std::bad_alloc", "can't allocate memory"}

// Canonical expressions of the families that have no expression of their own.
const (
	exprDeviceOOM     = "device out of memory"
	exprHostOOM       = "host out of memory"
	exprIllegal       = "an illegal memory access was encountered"
	exprLaunch        = "unspecified launch failure"
	exprMisaligned    = "misaligned address"
	exprSameDevice    = "Expected all tensors to be on the same device"
	exprMemFaultLabel = "Memory access fault by GPU: "
)

// classify maps an exception class and the first line of its message (or a
// bare log line, with class "") to a signature without Exception.
func classify(class, msg string) Signature {
	short := lastComponent(class)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	withClass := func(m string) string {
		switch {
		case class == "":
			return normalizeMessage(m)
		case strings.TrimSpace(m) == "":
			return class
		}
		return class + ": " + normalizeMessage(m)
	}
	switch {
	case infraClasses[short]:
		return Signature{Family: FamilyInfra, Expression: withClass(msg)}
	case has(infraMessages...):
		return Signature{Family: FamilyInfra, Expression: normalizeMessage(msg)}
	case strings.HasSuffix(short, "OutOfMemoryError") || has(deviceOOMMessages...):
		return Signature{Family: FamilyOOM, Expression: exprDeviceOOM}
	case short == "MemoryError" || short == "bad_alloc" || has(hostOOMMessages...):
		return Signature{Family: FamilyOOM, Expression: exprHostOOM, Backend: BackendCPU}
	case has("device-side assert triggered", "cudaErrorAssert", "hipErrorAssert", "runtime error (59)"):
		return Signature{Family: FamilyDeviceAssert}
	case has("an illegal memory access was encountered", "cudaErrorIllegalAddress"):
		return Signature{Family: FamilyIllegalAddress, Expression: exprIllegal}
	case has("misaligned address", "cudaErrorMisalignedAddress"):
		return Signature{Family: FamilyMisaligned, Expression: exprMisaligned}
	case has("unspecified launch failure", "cudaErrorLaunchFailure", "hipErrorLaunchFailure"):
		return Signature{Family: FamilyLaunchFailure, Expression: exprLaunch}
	case has("CUBLAS_STATUS_", "HIPBLAS_STATUS_", "rocblas_status_", "cublas runtime error"):
		return Signature{Family: FamilyCUBLASError, Expression: cublasStatus(msg)}
	case has("CUDNN_STATUS_", "cuDNN error", "miopenStatus"):
		st := cudnnStatusRe.FindString(msg)
		if st == "" {
			st = normalizeMessage(msg)
		}
		return Signature{Family: FamilyCUDNNError, Expression: st}
	case class == "" && inductorMsgRe.MatchString(msg):
		// Inductor's Triton assert message on a line of its own (a log, an
		// issue title): the device assert, as the CPU build raises it as
		// an exception instead.
		return Signature{Family: FamilyDeviceAssert, Backend: BackendTriton, Expression: normalizeExpression(msg)}
	case has("Memory access fault by GPU"):
		reason := ""
		if m := memFaultRe.FindStringSubmatch(msg); m != nil {
			reason = m[1]
		}
		return Signature{Family: FamilyROCmMemFault, Backend: BackendHIP,
			Expression: exprMemFaultLabel + normalizeMessage(reason)}
	case has(anomalyText):
		s := Signature{Family: FamilyNaNAnomaly, Expression: Normalize(msg)}
		if m := anomalyFnRe.FindStringSubmatch(msg); m != nil {
			s.Kernel = m[1]
		}
		return s
	case has("Expected all tensors to be on the same device", "is not on the expected device"):
		s := Signature{Family: FamilyDeviceMismatch, Expression: exprSameDevice}
		if m := methodRe.FindStringSubmatch(msg); m != nil {
			s.Kernel = methodOp(m[1])
		}
		return s
	}
	if m := thcErrorRe.FindStringSubmatch(msg); m != nil {
		return Signature{Family: FamilyCUDAError, Expression: normalizeMessage(m[2])}
	}
	if m := atenErrorRe.FindStringSubmatch(msg); m != nil && m[1] != "" {
		return Signature{Family: FamilyCUDAError, Expression: normalizeMessage(m[1])}
	}
	if class == "" {
		return Signature{Family: FamilyHostCheck, Expression: normalizeMessage(msg)}
	}
	s := Signature{Family: FamilyHostCheck, Expression: withClass(msg)}
	// A torch op's own check that names NaN or Inf (multinomial's
	// "probability tensor contains either `inf`, `nan` or element < 0") has
	// a class, shared with its device assert, and stays a host check.
	if nonFinite(class, msg) && s.Class() == "" {
		s.Family = FamilyNaNAnomaly
	}
	return s
}

// thcCublasStatuses map THC's cuBLAS error messages (aten/src/THC/THCGeneral.cpp,
// __THCublasCheck, <= 1.4: "cublas runtime error : <message>") to the
// status each stands for.
var thcCublasStatuses = map[string]string{
	"resource allocation failed":                         "CUBLAS_STATUS_ALLOC_FAILED",
	"library not initialized":                            "CUBLAS_STATUS_NOT_INITIALIZED",
	"an invalid numeric value was used as an argument":   "CUBLAS_STATUS_INVALID_VALUE",
	"an absent device architectural feature is required": "CUBLAS_STATUS_ARCH_MISMATCH",
	"an access to GPU memory space failed":               "CUBLAS_STATUS_MAPPING_ERROR",
	"the GPU program failed to execute":                  "CUBLAS_STATUS_EXECUTION_FAILED",
	"an internal operation failed":                       "CUBLAS_STATUS_INTERNAL_ERROR",
}

// cublasStatus is a cuBLAS error's status: the CUBLAS_STATUS_* (or
// HIPBLAS_STATUS_*, rocblas_status_*) token the message names, without the
// call that follows it ("when calling `cublasSgemm( handle, opa, ...)`",
// c10 CUDA_CHECK / TORCH_CUDABLAS_CHECK, 1.x and 2.x); for THC's text, the
// status its message stands for.
func cublasStatus(msg string) string {
	if st := cublasStatusRe.FindString(msg); st != "" {
		return st
	}
	if m := thcCublasRe.FindStringSubmatch(msg); m != nil {
		if st, ok := thcCublasStatuses[strings.TrimSpace(m[1])]; ok {
			return st
		}
		return "cublas runtime error: " + normalizeMessage(m[1])
	}
	return normalizeMessage(msg)
}

// anomalyText is what autograd's anomaly mode says of the backward
// Function that returned NaN.
const anomalyText = "returned nan values in its"

// nonFiniteClasses are the exception classes a finiteness check raises
// (besides FloatingPointError, which says so by itself, and a class of the
// user's own).
var nonFiniteClasses = map[string]bool{
	"ValueError": true, "RuntimeError": true, "AssertionError": true, "ArithmeticError": true, "OverflowError": true,
}

// pythonErrors are Python's built-in classes named ...Error: not a user's
// own class, and not one a finiteness check raises unless listed in
// nonFiniteClasses (TypeError: isnan(): argument 'input' must be Tensor).
var pythonErrors = map[string]bool{
	"ArithmeticError": true, "AssertionError": true, "AttributeError": true, "BlockingIOError": true,
	"BrokenPipeError": true, "BufferError": true, "ChildProcessError": true, "ConnectionAbortedError": true,
	"ConnectionError": true, "ConnectionRefusedError": true, "ConnectionResetError": true, "EOFError": true,
	"EnvironmentError": true, "FileExistsError": true, "FileNotFoundError": true, "FloatingPointError": true,
	"IOError": true, "ImportError": true, "IndentationError": true, "IndexError": true, "InterruptedError": true,
	"IsADirectoryError": true, "KeyError": true, "LookupError": true, "MemoryError": true,
	"ModuleNotFoundError": true, "NameError": true, "NotADirectoryError": true, "NotImplementedError": true,
	"OSError": true, "OverflowError": true, "PermissionError": true, "ProcessLookupError": true,
	"PythonFinalizationError": true, "RecursionError": true, "ReferenceError": true, "RuntimeError": true,
	"SyntaxError": true, "SystemError": true, "TabError": true, "TimeoutError": true, "TypeError": true,
	"UnboundLocalError": true, "UnicodeDecodeError": true, "UnicodeEncodeError": true, "UnicodeError": true,
	"UnicodeTranslateError": true, "ValueError": true, "ZeroDivisionError": true,
}

// notNonFinite are torch messages whose "inf" or "infinity" names no
// value: GradScaler's (and ShardedGradScaler's) step with no gradient to
// check, _foreach_norm of an empty tensor.
var notNonFinite = []string{"No inf checks were recorded", "infinity norm"}

// nonFinite reports whether an exception is a finiteness check's: a
// FloatingPointError, or a ValueError, RuntimeError, AssertionError,
// ArithmeticError, OverflowError or a user's own ...Error class whose
// message's first line says a value is NaN or infinite, as a word ("loss is
// nan", "Loss is NaN at step 3", "non-finite loss", "not finite", "is
// infinite", "cannot convert float infinity to integer", "isfinite"; not
// "nanoseconds", "info" or "inference"). A user class is a Python name
// outside torch's modules that Python does not define; a C++ class
// (c10::Error) is torch's own and is not one.
func nonFinite(class, msg string) bool {
	short := lastComponent(class)
	switch {
	case class == "" || strings.Contains(class, "::"):
		return false
	case short == "FloatingPointError":
		return true
	case nonFiniteClasses[short]:
	case strings.HasSuffix(short, "Error") && !pythonErrors[short] && !strings.HasPrefix(class, "torch."):
	default:
		return false
	}
	for _, s := range notNonFinite {
		if strings.Contains(msg, s) {
			return false
		}
	}
	return nonFiniteRe.MatchString(msg)
}

// dispatchKeys are the dispatch-key infixes of generated wrapper names
// (wrapper_CUDA_addmm, wrapper_CompositeImplicitAutograd__index_select).
var dispatchKeys = []string{
	"CompositeExplicitAutogradNonFunctional", "CompositeExplicitAutograd", "CompositeImplicitAutograd",
	"QuantizedCUDA", "QuantizedCPU", "SparseCUDA", "SparseCPU", "CUDA", "HIP", "CPU", "Meta", "MPS", "XPU",
}

// methodOp turns a dispatcher wrapper's name into the op it wraps:
// "wrapper_CUDA_addmm" and "wrapper_addmm" → "addmm", "wrapper__index_select"
// → "index_select".
func methodOp(m string) string {
	m = strings.TrimPrefix(m, "wrapper_")
	for _, k := range dispatchKeys {
		if strings.HasPrefix(m, k+"_") {
			m = m[len(k)+1:]
			break
		}
	}
	return strings.TrimLeft(m, "_")
}

// cleanKernel reduces a printed function name to the kernel's identifier:
// "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, long>(float *, ...)"
// and "nll_loss_forward_reduce_cuda_kernel_2d" give the same; "void
// cunn_ClassNLLCriterion_updateOutput_kernel(Dtype *, ...) [with Dtype =
// float]" gives "cunn_ClassNLLCriterion_updateOutput_kernel"; "operator()"
// stays; Inductor's "triton_poi_fused_embedding_0" loses its index; old
// Triton's "unknown" is "".
func cleanKernel(raw string) string {
	k := strings.TrimSpace(raw)
	if i := strings.Index(k, " [with "); i >= 0 {
		k = k[:i]
	}
	k = strings.TrimSpace(strings.TrimSuffix(k, " const"))
	if strings.HasSuffix(k, ")") {
		if open := matchingOpen(k); open > 0 && !strings.HasSuffix(k[:open], "operator") {
			k = k[:open]
		}
	}
	k = stripAngles(k)
	if i := strings.LastIndex(k, "::"); i >= 0 {
		k = k[i+2:]
	}
	if i := strings.LastIndexAny(k, " *&"); i >= 0 {
		k = k[i+1:]
	}
	if k == "unknown" {
		return ""
	}
	if strings.HasPrefix(k, "triton_") {
		k = inductorIdxRe.ReplaceAllString(k, "")
	}
	return k
}

// matchingOpen returns the index of the '(' that matches the final ')' of
// s, or -1.
func matchingOpen(s string) int {
	depth := 0
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// stripAngles removes balanced <...> groups; an unbalanced '<' is kept.
func stripAngles(s string) string {
	if !strings.Contains(s, "<") {
		return s
	}
	var b strings.Builder
	depth := 0
	start := -1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '<':
			if depth == 0 {
				start = i
			}
			depth++
			continue
		case '>':
			if depth > 0 {
				depth--
				continue
			}
		}
		if depth == 0 {
			b.WriteByte(s[i])
		}
	}
	if depth > 0 && start >= 0 {
		b.WriteString(s[start:])
	}
	return b.String()
}
