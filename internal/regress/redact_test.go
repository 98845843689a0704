package regress

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
	"reduce/internal/signature"
	"reduce/internal/testenv"
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

// TestRedactJudged: a failure whose message redaction changes in the record
// is judged the recorded one from the live text (reduce judge redacts it
// alike), and holds no secret in the record; another message is not.
func TestRedactJudged(t *testing.T) {
	reg := exampleRegression(t, nil)
	live := "ValueError: sample 4 is out of bounds for /home/alice/data/x.bin on 10.1.2.3 (hf_AbCdEfGhIjKlMnOpQrStUv)."
	reg.Record.Signature = signature.Parse([]byte(live+"\n"), signature.ExitInfo{Code: 1})
	reg.Record.CPU = &CPUFailure{Exception: "ValueError", Message: strings.TrimPrefix(live, "ValueError: ")}
	dir, err := Write(t.TempDir(), reg)
	require.NoError(t, err)
	f, err := ReadFixture(dir)
	require.NoError(t, err)
	assert.Equal(t, "sample 4 is out of bounds for ~/data/x.bin on <ip> (<token>).", f.Record.CPU.Message)
	for _, s := range []string{"alice", "10.1.2.3", "AbCdEf"} {
		assert.NotContains(t, f.Record.Signature.Expression, s)
	}
	run := func(text string) string {
		v, err := JudgeRun(f, Run{Batch: BatchFile, Exit: signature.ExitInfo{Code: 1}, Stderr: "Traceback (most recent call last):\n" + text + "\n"})
		require.NoError(t, err)
		return v.Outcome
	}
	assert.Equal(t, OutcomeRecorded, run(live))
	assert.Equal(t, OutcomeRecorded, run("ValueError: sample 4 is out of bounds for /home/runner/data/x.bin on 10.9.9.9 (hf_ZyXwVuTsRqPoNmLkJiHgFe)."))
	assert.Equal(t, OutcomeOther, run("ValueError: sample 4 is out of range for x on y (z)."))
}

// TestRedactBatchFiles: the fixture's batch files, which users commit
// too, hold none of the corpus's secrets put in the recorded failure and
// in the meta of every batch (0 leaked, read as bytes and through
// fixtures.Read); they differ from the batches given in the failure and
// the meta alone, keep what reduce and the collector read back (the kept
// meta, a version, the interpreter never relative), name the same fixture
// whenever they are written, and the collector still runs the fixture, a
// recorded step's too.
func TestRedactBatchFiles(t *testing.T) {
	leaked := 0
	for _, c := range secretCorpus {
		reg := secretRegression(t, c.text)
		reg.Batch.Meta["note"] = "uploaded " + c.text
		reg.Batch.Meta["kept_samples"], reg.Batch.Meta["kept_ids"] = "3,7", "img-1,img-2"
		reg.Batch.Meta["recorded_at"], reg.Batch.Meta[MetaExpect+"_not"] = "2025-01-01T00:00:00Z", c.text
		without := *reg.Batch
		without.Error, without.Meta = nil, map[string]string{MetaExpect: ExpectPass, "host": reg.Batch.Meta["host"], "executable": c.text}
		reg.Neighbours = map[string]*fixtures.Batch{WithoutFile: &without}
		reg.Record.Neighbours = []Neighbour{{File: WithoutFile, What: "the batch without its culprits"}}
		raw := map[string]*fixtures.Batch{BatchFile: reg.Batch, WithoutFile: &without}

		out := t.TempDir()
		want, err := Dir(out, reg)
		require.NoError(t, err, c.kind)
		dir, err := Write(out, reg)
		require.NoError(t, err, c.kind)
		assert.Equal(t, want, dir, "%s: Dir names the directory Write writes", c.kind)
		again, err := Write(out, reg)
		require.NoError(t, err, "%s: the fixture written again is the same (its identity is that of the redacted files)", c.kind)
		assert.Equal(t, dir, again)
		other, err := Write(t.TempDir(), reg)
		require.NoError(t, err)
		assert.Equal(t, filepath.Base(dir), filepath.Base(other), "%s: the same name wherever it is written", c.kind)

		files := readDir(t, dir)
		otherFiles := readDir(t, other)
		for name, data := range files {
			for _, frag := range c.leak {
				if strings.Contains(string(data), frag) {
					leaked++
					t.Errorf("%s: %q leaks into %s", c.kind, frag, name)
				}
			}
			if strings.HasSuffix(name, ".bin") {
				assert.Equal(t, data, otherFiles[name], "%s: %s, the same bytes whenever written", c.kind, name)
			}
		}
		for name, in := range raw {
			got, err := fixtures.Read(filepath.Join(dir, name))
			require.NoError(t, err, "%s: %s", c.kind, name)
			var texts []string
			if got.Error != nil {
				texts = append(texts, got.Error.Text, got.Error.Exception)
				assert.Equal(t, in.Error.ExitStatus, got.Error.ExitStatus)
				rec, was := signature.Recorded(got.Error.Text), signature.Recorded(in.Error.Text)
				assert.Equal(t, was.Family, rec.Family, "%s: the recorded failure's family", c.kind)
				assert.Equal(t, was.Backend, rec.Backend, "%s: its backend (the go backend's device)", c.kind)
			}
			for k, v := range got.Meta {
				texts = append(texts, k+"="+v)
			}
			for _, s := range texts {
				for _, frag := range c.leak {
					if strings.Contains(s, frag) {
						leaked++
						t.Errorf("%s: %q leaks into %s as read: %q", c.kind, frag, name, s)
					}
				}
			}
			for _, k := range []string{"kept_samples", "kept_ids", MetaExpect, "torch", "cuda", "python", "git", "recorded_at"} {
				assert.Equal(t, in.Meta[k], got.Meta[k], "%s: %s: meta %s as it was", c.kind, name, k)
			}
			if exe := got.Meta["executable"]; strings.HasPrefix(in.Meta["executable"], "/") {
				assert.True(t, strings.HasPrefix(exe, "/") || strings.HasPrefix(exe, "~/"), "%s: the interpreter %q is no relative path", c.kind, exe)
			}
			// Only the failure and the meta differ.
			got.Error, got.Meta = in.Error, in.Meta
			var a, b bytes.Buffer
			_, err = fixtures.EncodeAs(&a, in, fixtures.FormatBin)
			require.NoError(t, err)
			_, err = fixtures.EncodeAs(&b, got, fixtures.FormatBin)
			require.NoError(t, err)
			assert.Equal(t, a.Bytes(), b.Bytes(), "%s: %s: the tensors, ids, op and attributes as they are", c.kind, name)
		}
	}
	assert.Zero(t, leaked, "secrets leaked into the batch files out of %d cases", len(secretCorpus))

	// What reduce reads back stays, even where it is a user's or a host's
	// name; the same words elsewhere go.
	red := newRedactor(&Record{}, &Regression{Batch: &fixtures.Batch{Meta: map[string]string{"user": "samples", "host": "eager"}}}).people()
	kept := map[string]string{"reduce_mode": "samples", fixtures.ReplayCompileKey: "eager", "partial": "true", "source_hash": "sha256:ab"}
	meta := map[string]string{"note": "samples on eager"}
	for k, v := range kept {
		meta[k] = v
	}
	b := red.batch(&fixtures.Batch{Meta: meta})
	for k, v := range kept {
		assert.Equal(t, v, b.Meta[k], k)
	}
	assert.Equal(t, "<user> on <host>", b.Meta["note"])
	assert.Nil(t, red.batch(nil))

	// The collector runs a fixture whose batches recorded secrets: an op's
	// and a recorded step's (whose paths stay: the collector imports it
	// from them), the interpreter of the step's directory kept absolute.
	py := testenv.Python(t, "torch", "pytest")
	root := t.TempDir()
	writeCollector(t, root)
	const secret = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345 from alice@corp-mail.acme.net on 10.12.34.56"
	withSecrets := func(r *Regression) {
		r.Batch.Error = &fixtures.Failure{Exception: "IndexError", Text: "Traceback (most recent call last):\n  File \"/home/alice/proj/train.py\", line 3\n" +
			"IndexError: Target 4 is out of bounds.\n(while " + secret + ")\n"}
		for _, b := range []*fixtures.Batch{r.Batch, r.Boundary} {
			b.Meta["host"], b.Meta["note"] = "trn-node-42.hpc.example.edu", secret
		}
	}
	reg := exampleRegression(t, nil)
	withSecrets(reg)
	_, err := Write(filepath.Join(root, "op"), reg)
	require.NoError(t, err)
	stepFile := filepath.Join(root, "my_step.py")
	require.NoError(t, os.WriteFile(stepFile, []byte("import torch.nn.functional as F\n\n\n"+
		"def step(batch):\n    return F.cross_entropy(batch['input'], batch['target'])\n"), 0o644))
	reg = exampleRegression(t, nil)
	withSecrets(reg)
	step := &fixtures.Step{Cwd: root, File: stepFile, Module: "__main__", Qualname: "step"}
	exe := filepath.Join(root, ".venv", "bin", "python")
	for _, b := range []*fixtures.Batch{reg.Batch, reg.Boundary} {
		b.Op, b.Step, b.Meta["executable"] = "", step, exe
	}
	reg.Record.Op, reg.Record.Step = "", step.Entry()
	stepDir, err := Write(filepath.Join(root, "step"), reg)
	require.NoError(t, err)
	signed(t, stepDir) // the user's, as reduce writes it from their batch
	got, err := fixtures.Read(filepath.Join(stepDir, BatchFile))
	require.NoError(t, err)
	assert.Equal(t, step, got.Step, "the recorded step as it was")
	assert.Equal(t, exe, got.Meta["executable"], "the interpreter absolute, not relative to the step's directory")
	assert.NotContains(t, got.Error.Text, "alice")
	res, out := collectorResults(t, []string{"REDUCE_BATCH_PATH=" + vendoredModule(t)}, root)
	for k, v := range map[string]string{
		"op/minimal_batch": "XFAIL", "op/passing_batch[boundary.bin]": "PASSED",
		"step/minimal_batch": "XFAIL", "step/passing_batch[boundary.bin]": "PASSED",
	} {
		assert.Equal(t, v, res[k], "%s (%s)\n%s", k, py, out)
	}
	assert.NotContains(t, out, "ERROR", "no collection error")
}

// TestRedactBatchErrorBound: a recorded failure's text longer than
// maxBatchError reaches the fixture's batch file cut in the middle (a cut
// inside a character included), its head and tail redacted, and parses
// as the whole text did.
func TestRedactBatchErrorBound(t *testing.T) {
	head := "Traceback (most recent call last):\n  File \"/home/alice/proj/train.py\", line 3, in step\n"
	line := "warning: step 12 loss is large (é)\n"
	tail := "with hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345\nIndexError: Target 4 is out of bounds.\n"
	var text string
	for pad := ""; ; pad += "#" {
		text = pad + head + strings.Repeat(line, 3*maxBatchError/2/len(line)) + tail
		if !utf8.RuneStart(text[maxBatchError/2]) {
			break // the head ends inside "é"
		}
	}
	cut := cutMiddle(text, maxBatchError)
	assert.Less(t, len(cut), maxBatchError+64)
	assert.Contains(t, cut, "bytes cut ...]")
	assert.Equal(t, signature.Recorded(text), signature.Recorded(cut), "the cut text parses as the whole")
	assert.Equal(t, text[:100], cutMiddle(text, len(text))[:100])

	reg := exampleRegression(t, nil)
	reg.Batch.Error = &fixtures.Failure{Exception: "IndexError", Text: text}
	dir, err := Write(t.TempDir(), reg)
	require.NoError(t, err)
	got, err := fixtures.Read(filepath.Join(dir, BatchFile))
	require.NoError(t, err)
	assert.Less(t, len(got.Error.Text), maxBatchError+64)
	for _, s := range []string{"alice", "AbCdEfGh"} {
		assert.NotContains(t, got.Error.Text, s)
	}
	want, have := signature.Recorded(text), signature.Recorded(got.Error.Text)
	assert.Equal(t, want.Family, have.Family)
	assert.Equal(t, want.Expression, have.Expression)
	assert.Equal(t, want.Exception, have.Exception)
}

// TestRedactSecretMeta: a meta or extra value whose key names a secret
// (wandb_api_key, db_password, HF_TOKEN, authHeader), which no rule of
// the text finds alone, reaches none of the fixture's files: each is the
// placeholder, in the batch files, the environment's meta and the extra
// at any depth; keys that only look alike (max_tokens, tokenizer, author)
// keep their values.
func TestRedactSecretMeta(t *testing.T) {
	secrets := map[string]string{"wandb_api_key": "3f9a81c4d2e7", "db_password": "hunter2", "HF_TOKEN": "abc123Qz",
		"authHeader": "Basic dXNlcjpwYXNz", "DBPASSWORD": "zq-pass-77"}
	plain := map[string]string{"max_tokens": "512", "tokenizer": "bert-base-cased", "author": "the team", "monkey_patch": "on"}
	reg := exampleRegression(t, nil)
	reg.Record.Environment.Meta = map[string]string{}
	reg.Record.Extra = map[string]any{"run": map[string]any{"HF_TOKEN": "abc123Qz", "steps": []any{map[string]any{"db_password": "hunter2"}}},
		"wandb_api_key": "3f9a81c4d2e7", "api_token": 123456789}
	for _, m := range []map[string]string{reg.Batch.Meta, reg.Boundary.Meta, reg.Record.Environment.Meta} {
		for k, v := range secrets {
			m[k] = v
		}
		for k, v := range plain {
			m[k] = v
		}
	}
	dir, err := Write(t.TempDir(), reg)
	require.NoError(t, err)
	for name, data := range readDir(t, dir) {
		for k, v := range secrets {
			assert.NotContains(t, string(data), v, "%s: the value of %s", name, k)
		}
		assert.NotContains(t, string(data), "123456789", name)
	}
	for _, name := range []string{BatchFile, BoundaryFile} {
		b, err := fixtures.Read(filepath.Join(dir, name))
		require.NoError(t, err)
		for k := range secrets {
			assert.Equal(t, "<secret>", b.Meta[k], "%s: meta %s", name, k)
		}
		for k, v := range plain {
			assert.Equal(t, v, b.Meta[k], "%s: meta %s", name, k)
		}
	}
	rec := readRegression(t, dir).Record
	for k := range secrets {
		assert.Equal(t, "<secret>", rec.Environment.Meta[k], "environment meta %s", k)
	}
	for k, v := range plain {
		assert.Equal(t, v, rec.Environment.Meta[k], "environment meta %s", k)
	}
	assert.Equal(t, "<secret>", rec.Extra["wandb_api_key"])
	assert.Equal(t, "<secret>", rec.Extra["api_token"])
	run := rec.Extra["run"].(map[string]any)
	assert.Equal(t, "<secret>", run["HF_TOKEN"])
	assert.Equal(t, "<secret>", run["steps"].([]any)[0].(map[string]any)["db_password"])

	for k, want := range map[string]bool{
		"wandb_api_key": true, "HF_TOKEN": true, "db_password": true, "DB_PASSWD": true, "x-auth-header": true, "wandbApiKey": true,
		"APIKEY": true, "hftoken": true, "aws_secret_access_key": true, "GOOGLE_CREDENTIALS": true, "private_key": true,
		"Authorization": true, "max_tokens": false, "tokenizer": false, "author": false, "host": false, "kept_ids": false,
		"monkey": false, "keyboard": false,
	} {
		assert.Equal(t, want, secretKey(k), k)
	}
	assert.Equal(t, "", secretValue(""), "an empty value says no secret")
}

// TestRedactSampleIDSecrets: the secrets of a sample id (a presigned
// URL's signature) and of a per-sample string value are taken out of
// every file of the fixture, the rest of them kept (no host or path rule:
// ids are the data's), the same in the batch files as in fixture.json,
// so that each culprit's id is one of the batch's; the fixture's name and
// bytes stay the same whenever written; a window's ids and strings too.
func TestRedactSampleIDSecrets(t *testing.T) {
	const id = "https://b.s3.amazonaws.com/x.jpg?X-Amz-Signature=abcdef0123456789abcdef"
	const redID = "https://b.s3.amazonaws.com/x.jpg?X-Amz-Signature=<secret>"
	const url = "https://data.acme-labs.io/u/bob/a.png?token=s3cr3tTok99&w=2"
	const redURL = "https://data.acme-labs.io/u/bob/a.png?token=<secret>&w=2"
	leaks := []string{"abcdef0123456789", "s3cr3tTok99"}
	withURLs := func(b *fixtures.Batch) {
		raw := func(s string) json.RawMessage { v, _ := json.Marshal(s); return v }
		n := &fixtures.Node{Kind: fixtures.NodeDict}
		for _, e := range b.Tensors {
			n.Keys, n.Items = append(n.Keys, raw(e.Name)), append(n.Items, &fixtures.Node{Kind: fixtures.NodeTensor, Name: e.Name})
		}
		n.Keys, n.Items = append(n.Keys, raw("url")), append(n.Items, &fixtures.Node{Kind: fixtures.NodeSamples, Values: []json.RawMessage{raw(url)}})
		b.Structure = n
		b.Meta["kept_ids"] = id
	}
	var first map[string][]byte
	var firstName string
	for range 2 {
		reg := exampleRegression(t, []string{id})
		withURLs(reg.Batch)
		withURLs(reg.Boundary)
		dir, err := Write(t.TempDir(), reg)
		require.NoError(t, err)
		files := readDir(t, dir)
		for name, data := range files {
			for _, frag := range leaks {
				assert.NotContains(t, string(data), frag, name)
			}
		}
		rec := readRegression(t, dir).Record
		require.Len(t, rec.Culprits, 1)
		assert.Equal(t, []string{redID}, rec.Culprits[0].IDs, "the id keeps all but its secret")
		for _, name := range []string{BatchFile, BoundaryFile} {
			b, err := fixtures.Read(filepath.Join(dir, name))
			require.NoError(t, err)
			assert.Equal(t, []string{redID}, b.SampleIDs, "%s: the culprit's id is the batch's", name)
			assert.Equal(t, redID, b.Meta["kept_ids"], name)
			leaf := b.Structure.SampleLeaf("url")
			require.NotNil(t, leaf, name)
			var got string
			require.NoError(t, json.Unmarshal(leaf.Values[0], &got))
			assert.Equal(t, redURL, got, name)
		}
		assert.Contains(t, string(files[ReportFile]), "X-Amz-Signature=", "report.md names the culprit by its redacted id")
		if first != nil {
			assert.Equal(t, firstName, filepath.Base(dir), "the same identity")
			for name, data := range files {
				if name != ReportFile {
					assert.Equal(t, string(first[name]), string(data), name)
				}
			}
		}
		first, firstName = files, filepath.Base(dir)
	}

	// A window's steps: their ids and strings, the batch given untouched.
	raw, _ := json.Marshal(url)
	b := &fixtures.Batch{SampleIDs: []string{"img-1", id}, Window: &fixtures.Window{Failed: 3, Steps: []*fixtures.WindowStep{{Index: 2,
		SampleIDs: []string{id}, Samples: 1, Structure: &fixtures.Node{Kind: fixtures.NodeList, Items: []*fixtures.Node{
			{Kind: fixtures.NodeSamples, Values: []json.RawMessage{raw}}, {Kind: fixtures.NodeValue, Value: raw}}}}}}}
	got := newRedactor(&Record{}, &Regression{Batch: b}).people().batch(b)
	assert.Equal(t, []string{"img-1", redID}, got.SampleIDs)
	step := got.Window.Steps[0]
	assert.Equal(t, []string{redID}, step.SampleIDs)
	var s string
	require.NoError(t, json.Unmarshal(step.Structure.Items[0].Values[0], &s))
	assert.Equal(t, redURL, s)
	assert.Equal(t, string(raw), string(step.Structure.Items[1].Value), "a shared value is the data's, as it is")
	assert.Equal(t, id, b.Window.Steps[0].SampleIDs[0], "the batch given is not modified")
	assert.Equal(t, string(raw), string(b.Window.Steps[0].Structure.Items[0].Values[0]))
	rec := Record{Window: &WindowCause{Steps: []WindowSamples{{Index: 2, Rows: []int{0}, IDs: []string{id}}}}}
	newRedactor(&rec, &Regression{Batch: b}).people().record(&rec)
	assert.Equal(t, []string{redID}, rec.Window.Steps[0].IDs)
}

// The recorded host leaves no trace: a meta host of any length is the
// placeholder in the batch files, and a host whose numbers the signature
// masked ("gpu-node-17" as "gpu-node-N") is found in the expression too.
func TestRedactHostForms(t *testing.T) {
	for _, host := range []string{"gpu-node-17.corp.internal", "vm"} {
		reg := exampleRegression(t, nil)
		reg.Batch.Meta["host"], reg.Boundary.Meta["host"] = host, host
		short, _, _ := strings.Cut(host, ".")
		// The FQDN, and its short name alone, numbers masked.
		reg.Record.Signature.Expression = "RuntimeError: NCCL error on " + strings.ReplaceAll(host, "17", "N") + " (" +
			strings.ReplaceAll(short, "17", "N") + "): unhandled system error"
		dir, err := Write(t.TempDir(), reg)
		require.NoError(t, err)
		for _, name := range []string{BatchFile, BoundaryFile} {
			b, err := fixtures.Read(filepath.Join(dir, name))
			require.NoError(t, err)
			assert.Equal(t, "<host>", b.Meta["host"], "%s: %s", host, name)
		}
		if len(short) < minRedacted {
			continue // too short to find in a text: the meta field alone
		}
		for name, data := range readDir(t, dir) {
			assert.NotContains(t, string(data), "gpu-node-N", "%s: %s", host, name)
			assert.NotContains(t, string(data), short, "%s: %s", host, name)
		}
	}
}
