package regress

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/kernels"
)

// secretCase is a secret as a recording may hold it, and the fragments
// of it that must not be found in what is posted or committed.
type secretCase struct {
	kind, text string
	leak       []string
}

var secretCorpus = []secretCase{
	{"email", "mail alice.smith+ml@corp-mail.acme.net now", []string{"alice.smith", "corp-mail"}},
	{"hf token", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", []string{"AbCdEfGhIjKlMnOpQr"}},
	{"aws key id", "AKIAIOSFODNN7EXAMPLE", []string{"IOSFODNN7"}},
	{"github ghp", "ghp_16C7e42F292c6912E7710c838347Ae178B4a", []string{"16C7e42F292c6912E"}},
	{"github gho", "gho_16C7e42F292c6912E7710c838347Ae178B4b", []string{"16C7e42F292c6912E"}},
	{"github pat", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", []string{"11ABCDEFG0123456789"}},
	{"openai", "sk-Abc123Def456Ghi789Jkl012Mno345", []string{"Abc123Def456Ghi789"}},
	{"openai project", "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr", []string{"Abc123Def456Ghi789"}},
	{"slack bot", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", []string{"AbCdEfGhIjKlMnOpQr", "123456789012"}},
	{"slack user", "xoxp-223456789012-2234567890123-ZbCdEfGhIjKlMnOpQrStUvWx", []string{"ZbCdEfGhIjKlMnOpQr"}},
	{"bearer jwt", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk",
		[]string{"eyJhbGciOiJIUzI1NiJ9", "dBjftJeZ4CVPmB92"}},
	{"bare jwt", "cookie=eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJib2IifQ.c2lnbmF0dXJlLXBhcnQtMTIz", []string{"eyJzdWIiOiJib2IifQ", "c2lnbmF0dXJl"}},
	{"wandb key", "WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567", []string{"0123456789abcdef0123"}},
	{"password json", `{"DB_PASSWORD": "hunter2-xyz-42"}`, []string{"hunter2-xyz"}},
	{"token env", "export HF_TOKEN='tok-Zq81-Xv99-secret'", []string{"Zq81-Xv99"}},
	{"aws secret", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", []string{"wJalrXUtnFEMI"}},
	{"presigned s3", "GET https://bucket.s3.amazonaws.com/x.bin?X-Amz-Algorithm=AWS4&X-Amz-Credential=ASIAXYZXYZXYZXYZXYZX%2F2024&X-Amz-Signature=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b&X-Amz-Security-Token=FwoGZXIvYXdzEBQaDLongToken",
		[]string{"9f86d081884c7d659", "FwoGZXIvYXdzEBQ", "ASIAXYZXYZXYZ"}},
	{"azure sas", "https://acct.blob.core.windows.net/c/x?sv=2020-08-04&sig=AbCdEf%2Bdef123456789", []string{"AbCdEf%2Bdef123"}},
	{"url token", "https://storage.acme-labs.io/api?token=s3cr3tvalue99&x=1", []string{"s3cr3tvalue99"}},
	{"private key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx3Qy9V2wD\nQd5TtW8Xr\n-----END RSA PRIVATE KEY-----", []string{"MIIEowIBAAKCAQEAx3Qy9V2wD", "Qd5TtW8Xr"}},
	{"url password", "git clone https://bob:hunter2pass@git.acme.example.com/repo.git", []string{"hunter2pass", "bob:"}},
	{"ipv4", "connect to 10.12.34.56:29500 failed", []string{"10.12.34.56"}},
	{"ipv4 private", "peer 192.168.1.77 reset", []string{"192.168.1.77"}},
	{"ipv6", "peer [2001:db8:85a3::8a2e:370:7334]:29500 gone", []string{"2001:db8:85a3", "8a2e:370:7334"}},
	{"ipv6 full", "from fe80:0:0:0:202:b3ff:fe1e:8329 now", []string{"b3ff:fe1e"}},
	{"home", "/home/alice/proj/data/train.bin", []string{"alice"}},
	{"mac home", "/Users/alicia/Downloads/x.bin", []string{"alicia"}},
	{"scratch", "/scratch/bob/run1/ckpt.pt", []string{"/scratch/bob"}},
	{"root", "/root/.cache/torch/x.pt", []string{"/root"}},
	{"data users", "/data/users/carol/set.bin", []string{"carol"}},
	{"windows", `C:\Users\dave\data\x.bin`, []string{"dave"}},
	{"fqdn", "lookup db7.corp.internal failed", []string{"db7.corp"}},
	{"recorded host", "on trn-node-42.hpc.example.edu", []string{"trn-node-42"}},
	{"short host", "rank 3 on trn-node-42 died", []string{"trn-node-42"}},
	{"user", "job of zoq failed", []string{"zoq"}},
}

// keepCorpus is what torch and reduce print that no rule may touch.
var keepCorpus = []string{
	"torch 1.13.1", "2.15.0+cpu", "torch 2.5.1+cu124", "cuDNN 8.9.2.26", "version 2.5.1.0", "shape [2, 3, 4]", "torch.Size([1, 16])",
	"tensor([0.5000, 1.2500, -3.0000])", "cross_entropy", "nll_loss2d_forward_kernel", "torch.float32", "torch.int64",
	"dtype torch.int", "cuda:0", "GPU 0", "src/model/train.py", "train.py:train_step", "0x7f3a2c001000", "c10::Error", "at::native::foo",
	"c10::cuda::CUDAError", "12:34:56", "1.2.3", "0.0.0.0", "127.0.0.1", "::1", "torch.nn.functional.cross_entropy",
	"max_tokens=512", "key_padding_mask=None", "num_tokens: 4", "unexpected token: 'x'", "t >= 0 && t < n_classes",
	"Target 4 is out of bounds.", "Expected target size [2, 4], got [2, 5]", "see https://pytorch.org/docs/stable/notes/cuda.html",
	"https://github.com/pytorch/pytorch/issues/1", "ignore_index=-100", "blocks.0.se.conv_reduce.weight", "1e+10", "-1.5e-07",
	"img-007", "/tmp/pytest/x.bin", "~/data", "a.b.c.d", "3.11.2 (main, Feb  4 2024) [GCC 12.2.0]",
}

// secretRegression is deviceRegression (inputs valid: report.md has an
// upstream issue) with s in the recorded error's last line, the
// diagnosis, the batch's and the environment's meta, and the source file.
func secretRegression(t *testing.T, s string) *Regression {
	reg := deviceRegression(t, contiguous(kernels.Float32, []int64{2, 3, 4}, ramp), contiguous(kernels.Int64, []int64{2, 4}, labels), []string{"img-1", "img-2"})
	reg.Batch.Meta["host"] = "trn-node-42.hpc.example.edu"
	reg.Batch.Meta["user"] = "zoq"
	reg.Batch.Meta["device"] = "NVIDIA H200 " + s
	reg.Batch.Meta["executable"] = s
	reg.Batch.Error = &fixtures.Failure{Exception: "RuntimeError", Text: "Traceback (most recent call last):\n  File \"/home/alice/proj/train.py\", line 3\n" +
		"RuntimeError: CUDA error: device-side assert triggered (" + s + ")\n"}
	reg.Record.Diagnosis += " after " + s
	reg.Record.Environment.Meta = map[string]string{"slurm.shared_dir": s}
	reg.Record.Signature.Expression += " " + s
	return reg
}

// TestRedactCorpus: every kind of secret, user, host, address and path,
// put in a recording's error text, meta, diagnosis and failure, reaches
// none of what users post or commit: the upstream issue, fixture.json and
// report.md (0 leaked, each case written as a fixture); and what torch
// prints that is no secret survives redaction unchanged.
func TestRedactCorpus(t *testing.T) {
	leaked := 0
	for _, c := range secretCorpus {
		reg := secretRegression(t, c.text)
		dir, err := Write(t.TempDir(), reg)
		require.NoError(t, err, c.kind)
		js, err := os.ReadFile(filepath.Join(dir, RecordFile))
		require.NoError(t, err)
		report, err := os.ReadFile(filepath.Join(dir, ReportFile))
		require.NoError(t, err)
		issue := issueOf(t, sectionOf(t, string(report)))
		unescape := strings.NewReplacer(`\`, "", "`", "")
		for what, text := range map[string]string{"fixture.json": string(js), "report.md": string(report), "upstream issue": issue} {
			for _, frag := range c.leak {
				if strings.Contains(text, frag) || strings.Contains(unescape.Replace(text), frag) {
					leaked++
					t.Errorf("%s: %q leaks into %s", c.kind, frag, what)
				}
			}
		}
		red := newRedactor(&reg.Record, reg)
		once := red.text(c.text)
		assert.NotEqual(t, c.text, once, c.kind)
		assert.Equal(t, once, red.text(once), "%s: redacting twice changes nothing", c.kind)
	}
	assert.Zero(t, leaked, "secrets leaked out of %d cases", len(secretCorpus))

	red := newRedactor(&Record{}, &Regression{Batch: &fixtures.Batch{Meta: map[string]string{"host": "trn-node-42.hpc.example.edu", "user": "zoq"}}})
	for _, s := range keepCorpus {
		assert.Equal(t, s, red.text(s), "no secret: kept as it is")
		assert.Equal(t, s, red.version(s))
	}
	for in, want := range map[string]string{
		"job of zoq on trn-node-42":                        "job of <user> on <host>",
		"zoq@trn-node-42.hpc.example.edu":                  "<email>",
		"WANDB_API_KEY=abc123 python train.py":             "WANDB_API_KEY=<secret> python train.py",
		"https://bob:pw@db7.corp.internal:5432/x?token=q1": "https://<user>:<password>@<host>:5432/x?token=<secret>",
		"/scratch/bob/run/x.pt and /home/alice/y":          "/scratch/<user>/run/x.pt and ~/y",
		"10.0.0.5:29500 and cudnn 8.9.2.26":                "<ip>:29500 and cudnn 8.9.2.26",
		`{"api_key": "k-123", 'password': 'p'}`:            `{"api_key": "<secret>", 'password': '<secret>'}`,
	} {
		assert.Equal(t, want, red.text(in), in)
	}
	assert.Equal(t, "8.9.2.26", red.version("8.9.2.26"), "a version's four numbers are no address")
}

// TestRedactRecordStable: fixture.json and report.md of a recording that
// holds secrets are the same bytes whenever they are written, and the
// upstream issue's two measured mutants are killed: a user name of three
// letters (minRedacted) and the short name of the recorded FQDN, each
// standing alone, are redacted in all three texts.
func TestRedactRecordStable(t *testing.T) {
	var first map[string][]byte
	for range 2 {
		reg := secretRegression(t, "WANDB_API_KEY=0123456789abcdef on 10.1.2.3 by /home/alice/x for zoq on trn-node-42")
		dir, err := Write(t.TempDir(), reg)
		require.NoError(t, err)
		files := readDir(t, dir)
		files[ReportFile] = []byte(strings.ReplaceAll(string(files[ReportFile]), dir, "DIR"))
		for _, name := range []string{RecordFile, ReportFile} {
			text := string(files[name])
			assert.NotContains(t, text, "zoq", "%s: a user name of 3 letters", name)
			assert.NotContains(t, text, "trn-node-42", "%s: the short name of the recorded host", name)
			assert.Contains(t, text, "for <user> on <host>", name)
		}
		if first != nil {
			assert.Equal(t, string(first[RecordFile]), string(files[RecordFile]))
			assert.Equal(t, string(first[ReportFile]), string(files[ReportFile]))
		}
		first = files
	}
	assert.Contains(t, string(first[ReportFile]), "for \\<user\\> on \\<host\\>", "the upstream issue's diagnosis")
}

// TestRedactMessagePattern: a CPU message that redaction changes is
// compared through a pattern that matches the live message (and any
// other text that redacts alike) and holds no secret; one it leaves alone
// stays the exact message.
func TestRedactMessagePattern(t *testing.T) {
	reg := exampleRegression(t, nil)
	live := "Target 4 is out of bounds for /home/alice/data/x.bin on 10.1.2.3 (hf_AbCdEfGhIjKlMnOpQrStUv)."
	reg.Record.CPU.Message = live
	dir, err := Write(t.TempDir(), reg)
	require.NoError(t, err)
	got := readRegression(t, dir).Record
	assert.Equal(t, "Target 4 is out of bounds for ~/data/x.bin on <ip> (<token>).", got.CPU.Message)
	require.NotEmpty(t, got.MessagePattern)
	for _, s := range []string{"alice", "10.1.2.3", "AbCdEf"} {
		assert.NotContains(t, got.MessagePattern, s)
	}
	re := regexp.MustCompile("(?s)" + got.MessagePattern)
	full := "IndexError " + live + "\n"
	assert.True(t, re.MatchString(full), "the live message matches %q", got.MessagePattern)
	assert.True(t, re.MatchString("IndexError Target 4 is out of bounds for /home/runner/data/x.bin on 10.9.9.9 (hf_other)."))
	assert.False(t, re.MatchString("IndexError Target 5 is out of bounds for x on y (z)."))
	if py, err := exec.LookPath("python3"); err == nil {
		// The collector searches with Python's re (reduce_collect._mismatch).
		cmd := exec.Command(py, "-c", "import re,sys; sys.exit(0 if re.search(sys.argv[1], sys.argv[2], re.DOTALL) else 1)", got.MessagePattern, full)
		assert.NoError(t, cmd.Run(), "Python's re matches the live message with %q", got.MessagePattern)
	}

	// A message with nothing to redact stays exact, without a pattern.
	plain := exampleRegression(t, nil)
	dir, err = Write(t.TempDir(), plain)
	require.NoError(t, err)
	rec := readRegression(t, dir).Record
	assert.Equal(t, plain.Record.CPU.Message, rec.CPU.Message)
	assert.Empty(t, rec.MessagePattern)
}
