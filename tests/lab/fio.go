package lab

import (
	"bytes"
	"context"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// jobFiles are the fio jobs of the foundation acceptance. They take the
// target from the environment (fio expands ${VAR} in job files), so one job
// file serves every disk: DEV is the guest block device (/dev/vdX).
//
//go:embed jobs/*.fio
var jobFiles embed.FS

// Job returns the text of the fio job file jobs/<name>.fio.
func Job(name string) (string, error) {
	b, err := jobFiles.ReadFile("jobs/" + name + ".fio")
	if err != nil {
		return "", fmt.Errorf("fio job %s: %w", name, err)
	}
	return string(b), nil
}

// Jobs lists the names of the embedded fio jobs.
func Jobs() []string {
	entries, _ := jobFiles.ReadDir("jobs")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".fio"))
	}
	sort.Strings(names)
	return names
}

// FioJob is one fio run in a guest.
type FioJob struct {
	File string            // job file text; may be empty when Args define the job
	Env  map[string]string // environment, e.g. {"DEV": "/dev/vdb"} for ${DEV}
	Args []string          // extra fio arguments, before the job file
}

// FioIO is fio's summary of one direction (read, write or trim) of a job.
type FioIO struct {
	IOBytes  uint64        `json:"io_bytes"`
	TotalIOs uint64        `json:"total_ios"`
	ShortIOs uint64        `json:"short_ios"`
	DropIOs  uint64        `json:"drop_ios"`
	BWBytes  uint64        `json:"bw_bytes"` // bytes per second
	IOPS     float64       `json:"iops"`
	Runtime  time.Duration `json:"-"`
	RuntimeM uint64        `json:"runtime"` // milliseconds, as fio reports it
}

// FioJobResult is one job of fio's JSON output.
type FioJobResult struct {
	Name     string        `json:"jobname"`
	Error    int           `json:"error"`
	Read     FioIO         `json:"read"`
	Write    FioIO         `json:"write"`
	Trim     FioIO         `json:"trim"`
	Sync     FioSync       `json:"sync"`
	Runtime  time.Duration `json:"-"`
	RuntimeM uint64        `json:"job_runtime"` // milliseconds
}

// FioSync counts a job's fsync and fdatasync calls. fio 3.33 reports
// fsyncs in sync.total_ios but fdatasyncs only as latency samples
// (sync.lat_ns.N; observed: fdatasync=1 over 256 writes gives total_ios 0,
// N 255), so TotalIOs is the larger of the two. fio issues no sync after a
// job's last write, so a job syncing every write shows writes-1.
type FioSync struct {
	TotalIOs uint64 `json:"total_ios"`
	LatNs    struct {
		N uint64 `json:"N"`
	} `json:"lat_ns"`
}

// FioDiskUtil is fio's view of the guest block device's own counters
// (from /sys/block/*/stat), for the whole run.
type FioDiskUtil struct {
	Name        string  `json:"name"`
	ReadIOs     uint64  `json:"read_ios"`
	WriteIOs    uint64  `json:"write_ios"`
	ReadMerges  uint64  `json:"read_merges"`
	WriteMerges uint64  `json:"write_merges"`
	ReadTicks   uint64  `json:"read_ticks"`
	WriteTicks  uint64  `json:"write_ticks"`
	InQueue     uint64  `json:"in_queue"`
	Util        float64 `json:"util"`
}

// FioResult is a parsed fio run.
type FioResult struct {
	Version  string          `json:"fio version"`
	Jobs     []FioJobResult  `json:"jobs"`
	DiskUtil []FioDiskUtil   `json:"disk_util"`
	Raw      json.RawMessage `json:"-"` // fio's JSON as printed
}

// Total sums the jobs' bytes, requests and syncs; runtimes are the longest.
func (r *FioResult) Total() FioJobResult {
	var t FioJobResult
	t.Name = "total"
	add := func(dst *FioIO, src FioIO) {
		dst.IOBytes += src.IOBytes
		dst.TotalIOs += src.TotalIOs
		dst.ShortIOs += src.ShortIOs
		dst.DropIOs += src.DropIOs
		dst.BWBytes += src.BWBytes
		dst.IOPS += src.IOPS
		dst.Runtime = max(dst.Runtime, src.Runtime)
		dst.RuntimeM = max(dst.RuntimeM, src.RuntimeM)
	}
	for _, j := range r.Jobs {
		add(&t.Read, j.Read)
		add(&t.Write, j.Write)
		add(&t.Trim, j.Trim)
		t.Sync.TotalIOs += j.Sync.TotalIOs
		t.Sync.LatNs.N += j.Sync.LatNs.N
		t.Runtime = max(t.Runtime, j.Runtime)
		t.RuntimeM = max(t.RuntimeM, j.RuntimeM)
		if t.Error == 0 {
			t.Error = j.Error
		}
	}
	return t
}

// ParseFio parses fio's --output-format=json output. Text before the JSON
// object (fio prints notes such as "note: both iodepth >= 1 and synchronous
// I/O engine are selected" into the same stream) is skipped.
func ParseFio(out []byte) (*FioResult, error) {
	start := bytes.Index(out, []byte("\n{"))
	if bytes.HasPrefix(out, []byte("{")) {
		start = 0
	} else if start >= 0 {
		start++
	} else {
		return nil, fmt.Errorf("parse fio output: no JSON object in %q", truncate(string(out), 200))
	}
	dec := json.NewDecoder(bytes.NewReader(out[start:]))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("parse fio output: %w", err)
	}
	var r FioResult
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("parse fio output: %w", err)
	}
	if len(r.Jobs) == 0 {
		return nil, fmt.Errorf("parse fio output: no jobs")
	}
	r.Raw = raw
	for i := range r.Jobs {
		j := &r.Jobs[i]
		j.Runtime = time.Duration(j.RuntimeM) * time.Millisecond
		j.Sync.TotalIOs = max(j.Sync.TotalIOs, j.Sync.LatNs.N)
		for _, io := range []*FioIO{&j.Read, &j.Write, &j.Trim} {
			io.Runtime = time.Duration(io.RuntimeM) * time.Millisecond
		}
	}
	return &r, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Fio runs fio in the guest and parses its JSON output. A job that fio
// reports with a non-zero error is returned together with an error.
func (vm *VM) Fio(ctx context.Context, job FioJob) (*FioResult, error) {
	start := time.Now()
	res, err := RunFio(ctx, vm, vm.Name, job)
	if err == nil {
		vm.stage("fio took %.1fs", time.Since(start).Seconds())
	}
	return res, err
}

// Runner runs shell scripts in a guest: a VM, or a libvirt domain's Guest.
type Runner interface {
	RunOK(ctx context.Context, script string) (string, error)
}

// RunFio runs fio in the guest behind r (named name in errors) and parses
// its JSON output, as VM.Fio does.
func RunFio(ctx context.Context, r Runner, name string, job FioJob) (*FioResult, error) {
	var sh strings.Builder
	sh.WriteString("set -e\ncd /tmp\n")
	args := []string{"fio", "--output-format=json", "--output=/tmp/lab-fio.json"}
	for _, a := range job.Args {
		args = append(args, shellQuote(a))
	}
	if job.File != "" {
		fmt.Fprintf(&sh, "printf %%s %s | base64 -d >/tmp/lab-job.fio\n",
			base64.StdEncoding.EncodeToString([]byte(job.File)))
		args = append(args, "/tmp/lab-job.fio")
	}
	keys := make([]string, 0, len(job.Env))
	for k := range job.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := ""
	for _, k := range keys {
		env += k + "=" + shellQuote(job.Env[k]) + " "
	}
	// fio's own messages go to a file so that only the JSON reaches the
	// host on success, and only the messages on failure.
	fmt.Fprintf(&sh, "rm -f /tmp/lab-fio.json\nif ! env %s%s >/tmp/lab-fio.err 2>&1; then cat /tmp/lab-fio.err; exit 1; fi\ncat /tmp/lab-fio.json\n",
		env, strings.Join(args, " "))

	out, err := r.RunOK(ctx, sh.String())
	if err != nil {
		return nil, fmt.Errorf("fio in %s: %w", name, err)
	}
	res, err := ParseFio([]byte(out))
	if err != nil {
		return nil, fmt.Errorf("fio in %s: %w", name, err)
	}
	for _, j := range res.Jobs {
		if j.Error != 0 {
			return res, fmt.Errorf("fio in %s: job %s failed with error %d", name, j.Name, j.Error)
		}
	}
	return res, nil
}
