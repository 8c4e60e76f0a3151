package main

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/fspair/fspair/tests/workload"
)

// A Personality is one of the four Filebench workloads the knowledge
// base's verdicts are about, as Filebench ships it in workloads/<Name>.f.
type Personality struct {
	Name  string            // Filebench's name: webserver, varmail, fileserver, randomfileaccess
	Class workload.Workload // the knowledge base's name for it: web, mail, fileserver, rfa
	// Files is the lab's $nfiles: enough files that the file set outgrows
	// a 512 MiB guest's page cache, so that its I/O reaches the disk
	// (shared/vendor/filebench/README.md measured the shipped 1,000 of
	// webserver and varmail to stay in the cache).
	Files int
}

// Personalities are the four, in the knowledge base's order. The file
// counts are those shared/vendor/filebench/README.md measured to reach
// the disk from a 512 MiB guest: webserver and varmail 40,000 files of
// 16 KiB on average (about 625 MB), randomfileaccess 30,000 (26.7 KiB on
// average by its size table: about 780 MB), fileserver's shipped 10,000
// of 128 KiB (about 1.25 GB).
var Personalities = []Personality{
	{Name: "webserver", Class: workload.Web, Files: 40000},
	{Name: "varmail", Class: workload.Mail, Files: 40000},
	{Name: "fileserver", Class: workload.Fileserver, Files: 10000},
	{Name: "randomfileaccess", Class: workload.RFA, Files: 30000},
}

// FindPersonality returns the personality called name (Filebench's name
// or the knowledge base's), and false if there is none.
func FindPersonality(name string) (Personality, bool) {
	for _, p := range Personalities {
		if p.Name == name || string(p.Class) == name {
			return p, true
		}
	}
	return Personality{}, false
}

// ReadPersonalities returns the shipped text of each personality's
// workloads/<name>.f from the Filebench source tarball, by name. The
// files are read from the tarball at run time and never copied into the
// repository (they are Filebench's, under the CDDL).
func ReadPersonalities(tarball string) (map[string]string, error) {
	f, err := os.Open(tarball)
	if err != nil {
		return nil, fmt.Errorf("read personalities: %w", err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("read personalities from %s: %w", tarball, err)
	}
	want := map[string]bool{}
	for _, p := range Personalities {
		want[p.Name+".f"] = true
	}
	out := map[string]string{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read personalities from %s: %w", tarball, err)
		}
		dir, file := path.Split(h.Name)
		if h.Typeflag != tar.TypeReg || path.Base(dir) != "workloads" || !want[file] {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("read %s from %s: %w", h.Name, tarball, err)
		}
		out[strings.TrimSuffix(file, ".f")] = string(b)
	}
	for _, p := range Personalities {
		if _, ok := out[p.Name]; !ok {
			return nil, fmt.Errorf("read personalities from %s: no workloads/%s.f in it", tarball, p.Name)
		}
	}
	return out, nil
}

// Params are what the lab changes in a shipped personality, and nothing
// else (shared/vendor/filebench/README.md lists why each must change).
type Params struct {
	Dir     string // $dir: the guest disk's mount (shipped: /tmp, a tmpfs in the guest)
	Files   int    // $nfiles
	MemSize string // every thread's memsize= (shipped: 10m; webserver's 100 threads then need 1 GB)
	Runtime int    // seconds of the run phase (shipped: 60, and none at all in randomfileaccess.f)
	// Vars are a held-out variant's changes (Spec.Vars): each a `set
	// $NAME=` of the personality given another value; filesize sets the
	// mean of its file-size distribution.
	Vars map[string]string
}

var (
	setDirRE     = regexp.MustCompile(`^set\s+\$dir\s*=`)
	setFilesRE   = regexp.MustCompile(`^set\s+\$nfiles\s*=`)
	setRuntimeRE = regexp.MustCompile(`^set\s+\$runtime\s*=`)
	runRE        = regexp.MustCompile(`^run(\s|$)`)
	memsizeRE    = regexp.MustCompile(`memsize\s*=\s*[0-9]+[kmgKMG]?`)
	// ",cached=$cached": an attribute of filesets in Filebench 1.4 that
	// 1.5 does not know.
	cachedRE  = regexp.MustCompile(`\s*,\s*cached\s*=\s*[^,\s]+`)
	randvarRE = regexp.MustCompile(`(?s)^define\s+randvar\s+name\s*=\s*(\$[A-Za-z_][A-Za-z0-9_]*)\s*,\s*(.*\S)\s*$`)
	memValRE  = regexp.MustCompile(`^[0-9]+[kmg]?$`)
	// A held-out variant's `set $NAME=...`, and the mean of a cvar.
	setVarRE   = regexp.MustCompile(`^set\s+\$([A-Za-z_][A-Za-z0-9_]*)\s*=`)
	varNameRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	cvarMeanRE = regexp.MustCompile(`mean:[0-9]+`)
	dirValRE   = regexp.MustCompile(`^/[A-Za-z0-9_./-]*$`)
)

// Patch returns the personality name's shipped text src with the lab's
// changes and no others:
//
//   - $dir and $nfiles set to p's;
//   - every thread's memsize= set to p.MemSize;
//   - Filebench 1.4's `define randvar name=$x, ATTRS` (which 1.5 fails
//     to parse: "syntax error at 'randvar'") written as 1.5's
//     `set $x = randvar(ATTRS)`, attributes and tables unchanged;
//   - fileset attributes `cached=...` dropped (1.5 has none);
//   - $runtime, if set, set to p.Runtime, every `run` line dropped and
//     one `run <p.Runtime>` written at the end (randomfileaccess.f ships
//     without one).
//
// A personality without $dir, $nfiles or a memsize= is an error: the
// patch would silently leave it as shipped.
func Patch(name, src string, p Params) (string, error) {
	if !dirValRE.MatchString(p.Dir) {
		return "", fmt.Errorf("patch %s: dir %q: want an absolute path of letters, digits and ._-/", name, p.Dir)
	}
	if p.Files <= 0 || p.Runtime <= 0 {
		return "", fmt.Errorf("patch %s: files %d and runtime %d must be positive", name, p.Files, p.Runtime)
	}
	if !memValRE.MatchString(p.MemSize) {
		return "", fmt.Errorf("patch %s: memsize %q: want a size such as 1m", name, p.MemSize)
	}
	for k, v := range p.Vars {
		if _, ok := varBytes(v); !ok || !varNameRE.MatchString(k) || k == "dir" || k == "nfiles" || k == "runtime" {
			return "", fmt.Errorf("patch %s: variant %s=%s: want NAME=N[k|m|g], NAME not dir, nfiles or runtime", name, k, v)
		}
	}
	varsSet := map[string]int{}
	lines := strings.Split(strings.TrimRight(src, "\n"), "\n")
	var out, changed []string
	dirs, files, mems, randvars, cached := 0, 0, 0, 0, 0
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		t := strings.TrimSpace(l)
		switch {
		case setDirRE.MatchString(t):
			out = append(out, "set $dir="+p.Dir)
			dirs++
		case setFilesRE.MatchString(t):
			out = append(out, fmt.Sprintf("set $nfiles=%d", p.Files))
			files++
		case setRuntimeRE.MatchString(t):
			out = append(out, fmt.Sprintf("set $runtime=%d", p.Runtime))
		case runRE.MatchString(t):
			// Written once at the end.
		case setVarRE.MatchString(t) && p.Vars[setVarRE.FindStringSubmatch(t)[1]] != "":
			k := setVarRE.FindStringSubmatch(t)[1]
			v := p.Vars[k]
			if k == "filesize" {
				if !cvarMeanRE.MatchString(t) {
					return "", fmt.Errorf("patch %s: %q: want a distribution with a mean to set", name, t)
				}
				b, _ := varBytes(v)
				l = cvarMeanRE.ReplaceAllString(t, fmt.Sprintf("mean:%d", b))
			} else {
				l = fmt.Sprintf("set $%s=%s", k, v)
			}
			out = append(out, l)
			varsSet[k]++
		case strings.HasPrefix(t, "define randvar"):
			// The statement goes on while a table's braces are open or
			// a line ends in "=" or "," (the table starts on the next).
			stmt, depth := t, braces(t)
			for (depth > 0 || strings.HasSuffix(strings.TrimSpace(lines[i]), "=") || strings.HasSuffix(strings.TrimSpace(lines[i]), ",")) && i+1 < len(lines) {
				i++
				stmt += "\n" + lines[i]
				depth += braces(lines[i])
			}
			if depth != 0 {
				return "", fmt.Errorf("patch %s: unbalanced braces in %q", name, stmt)
			}
			m := randvarRE.FindStringSubmatch(stmt)
			if m == nil {
				return "", fmt.Errorf("patch %s: %q: want define randvar name=$x, ATTRS", name, firstLine(stmt))
			}
			out = append(out, fmt.Sprintf("set %s = randvar(%s)", m[1], m[2]))
			randvars++
		default:
			n := len(memsizeRE.FindAllString(l, -1))
			l = memsizeRE.ReplaceAllString(l, "memsize="+p.MemSize)
			mems += n
			if strings.HasPrefix(t, "define fileset") {
				cached += len(cachedRE.FindAllString(l, -1))
				l = cachedRE.ReplaceAllString(l, "")
			}
			out = append(out, l)
		}
	}
	switch {
	case dirs != 1:
		return "", fmt.Errorf("patch %s: %d lines set $dir, want 1", name, dirs)
	case files != 1:
		return "", fmt.Errorf("patch %s: %d lines set $nfiles, want 1", name, files)
	case mems == 0:
		return "", fmt.Errorf("patch %s: no thread has a memsize= to set", name)
	}
	for _, k := range slices.Sorted(maps.Keys(p.Vars)) {
		if varsSet[k] != 1 {
			return "", fmt.Errorf("patch %s: %d lines set $%s, want 1 for the variant's %s=%s", name, varsSet[k], k, k, p.Vars[k])
		}
	}
	changed = append(changed, "$dir", "$nfiles", "memsize", "run length")
	for _, k := range slices.Sorted(maps.Keys(p.Vars)) {
		changed = append(changed, fmt.Sprintf("$%s (held-out variant: %s)", k, p.Vars[k]))
	}
	if randvars > 0 {
		changed = append(changed, fmt.Sprintf("%d randvar definitions in 1.5 syntax", randvars))
	}
	if cached > 0 {
		changed = append(changed, "fileset attribute cached dropped")
	}
	for len(out) > 0 && strings.TrimSpace(out[len(out)-1]) == "" {
		out = out[:len(out)-1]
	}
	out = append(out, "",
		fmt.Sprintf("# fspair lab: %s.f as shipped but for %s (tests/workload/filebench).", name, strings.Join(changed, ", ")),
		fmt.Sprintf("run %d", p.Runtime))
	return strings.Join(out, "\n") + "\n", nil
}

// varBytes parses a variant's value N[k|m|g].
func varBytes(v string) (int64, bool) {
	if !memValRE.MatchString(v) {
		return 0, false
	}
	mult := int64(1)
	switch v[len(v)-1] {
	case 'k':
		mult = 1 << 10
	case 'm':
		mult = 1 << 20
	case 'g':
		mult = 1 << 30
	}
	n, err := strconv.ParseInt(strings.TrimRight(v, "kmg"), 10, 64)
	return n * mult, err == nil && n > 0
}

// braces returns the opening minus the closing braces of s.
func braces(s string) int { return strings.Count(s, "{") - strings.Count(s, "}") }

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
