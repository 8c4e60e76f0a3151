package deploy

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"

	"github.com/fspair/fspair/exporter/privilege"
	"github.com/fspair/fspair/tests/alerting"
)

// loadCompose loads compose.yaml with compose-go as `docker compose` does,
// with an empty environment (so every ${VAR:-default} takes its default),
// paths resolved against the repository root, and the lab fleet's profile
// on, so that every test holds its services to the same rules.
func loadCompose(t testing.TB) *types.Project {
	t.Helper()
	root := repoRoot(t)
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "compose.yaml")},
		cli.WithWorkingDirectory(root),
		cli.WithName("fspair"),
		cli.WithResolvedPaths(true),
		cli.WithProfiles([]string{fleetProfile}),
	)
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("load compose.yaml with compose-go: %v", err)
	}
	return p
}

// The services compose.yaml must run (issue 5: the deployable bundle), and
// those of the lab fleet (profile fleet: README.md "A fleet").
var (
	wantServices = []string{"alertmanager", "fspair-exporter", "grafana", "libvirt-exporter", "node-exporter", "prometheus"}
	fleetHosts   = []string{"kvm-1", "kvm-2", "kvm-3"}
	fleetProfile = "fleet"
)

// fleetServices are the lab fleet's services: the simulated hosts'
// exporters, per host a Prometheus and a Thanos sidecar, Thanos Query and
// Thanos Ruler.
func fleetServices() []string {
	s := []string{"fleet-disks", "thanos-query", "thanos-ruler"}
	for _, h := range fleetHosts {
		s = append(s, "fleet-prometheus-"+h, "fleet-sidecar-"+h)
	}
	return s
}

func service(t testing.TB, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("compose.yaml has no service %s", name)
	}
	return s
}

// TestComposeLoads: compose.yaml loads with compose-go and has the
// services of the bundle and of the lab fleet, no more, no fewer; the
// fleet's only in its profile, so that `docker compose up` alone runs the
// bundle.
func TestComposeLoads(t *testing.T) {
	p := loadCompose(t)
	var got []string
	for name, s := range p.Services {
		got = append(got, name)
		inFleet := slices.Contains(fleetServices(), name)
		if onlyFleet := slices.Equal(s.Profiles, []string{fleetProfile}); inFleet != onlyFleet {
			t.Errorf("%s: profiles %v; want [%s] exactly for the lab fleet's services", name, s.Profiles, fleetProfile)
		}
	}
	sort.Strings(got)
	want := append(slices.Clone(wantServices), fleetServices()...)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("services %v, want %v", got, want)
	}
}

// TestComposeDockerCompose: the docker-compose of Debian 12 (1.29, the
// compose tool a host without Docker's own packages has) accepts the file
// too; it knows an older schema than compose-go.
func TestComposeDockerCompose(t *testing.T) {
	dc := requireBinary(t, "docker-compose", "docker-compose")
	root := repoRoot(t)
	// No Docker engine is needed for `config`.
	run(t, root, nil, dc, "--project-directory", root, "-f", filepath.Join(root, "compose.yaml"), "config", "-q")
}

// pinned reports why an image reference is not pinned: it needs a version
// tag (not latest) or a digest.
func pinned(ref string) error {
	if strings.Contains(ref, "@sha256:") {
		return nil
	}
	_, tag, ok := strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")
	if !ok || tag == "" {
		return fmt.Errorf("image %s has no tag", ref)
	}
	if tag == "latest" {
		return fmt.Errorf("image %s is not pinned (latest)", ref)
	}
	// A version, not a moving name such as "main" or "stable".
	if !regexp.MustCompile(`^v?[0-9]+(\.[0-9]+)+`).MatchString(tag) {
		return fmt.Errorf("image %s: tag %q is not a version", ref, tag)
	}
	return nil
}

// dockerfileFroms returns the base images of a Dockerfile's stages
// (FROM lines naming an earlier stage are left out).
func dockerfileFroms(t testing.TB, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open Dockerfile: %v", err)
	}
	defer f.Close()
	stages := map[string]bool{}
	var froms []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || !strings.EqualFold(fields[0], "FROM") {
			continue
		}
		img := fields[1]
		for _, f := range fields[1:] {
			if strings.HasPrefix(f, "--") {
				continue
			}
			img = f
			break
		}
		if !stages[strings.ToLower(img)] {
			froms = append(froms, img)
		}
		if len(fields) >= 4 && strings.EqualFold(fields[len(fields)-2], "AS") {
			stages[strings.ToLower(fields[len(fields)-1])] = true
		}
	}
	if len(froms) == 0 {
		t.Fatalf("%s has no FROM line", path)
	}
	return froms
}

// dockerfileOf returns the Dockerfile a service builds from.
func dockerfileOf(s types.ServiceConfig) string {
	df := s.Build.Dockerfile
	if df == "" {
		df = "Dockerfile"
	}
	if !filepath.IsAbs(df) {
		df = filepath.Join(s.Build.Context, df)
	}
	return df
}

// TestComposeImagesPinned: every image, and every base image of the
// Dockerfiles built, has a version tag; none is latest or untagged.
func TestComposeImagesPinned(t *testing.T) {
	p := loadCompose(t)
	for name, s := range p.Services {
		switch {
		case s.Build != nil:
			df := dockerfileOf(s)
			for _, from := range dockerfileFroms(t, df) {
				if err := pinned(from); err != nil {
					t.Errorf("%s: %s: %v", name, df, err)
				}
			}
			if s.Image != "" {
				if err := pinned(s.Image); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		case s.Image == "":
			t.Errorf("%s: neither image nor build", name)
		default:
			if err := pinned(s.Image); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
}

// TestComposeSameVersionsAsNative: compose runs the same software as the
// native stack and the tests: Prometheus, Alertmanager, Grafana and (the
// lab fleet) Thanos at the versions pinned in deploy/versions.env (the pinned binaries report those
// versions), the node exporter at the Debian package's upstream version.
func TestComposeSameVersionsAsNative(t *testing.T) {
	p := loadCompose(t)
	pins, err := alerting.PinnedVersions()
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{
		"prometheus":   "PROMETHEUS_VERSION",
		"alertmanager": "ALERTMANAGER_VERSION",
		"grafana":      "GRAFANA_VERSION",
		"thanos-query": "THANOS_VERSION",
		"thanos-ruler": "THANOS_VERSION",
	}
	for _, h := range fleetHosts {
		images["fleet-prometheus-"+h] = "PROMETHEUS_VERSION"
		images["fleet-sidecar-"+h] = "THANOS_VERSION"
	}
	for svc, key := range images {
		img := service(t, p, svc).Image
		if tag, want := imageTag(img), pins[key]; want == "" || tag != want {
			t.Errorf("%s: image %s, but deploy/versions.env pins %s=%q", svc, img, key, want)
		}
	}
	for bin, key := range map[string]string{"prometheus": "PROMETHEUS_VERSION", "alertmanager": "ALERTMANAGER_VERSION", "thanos": "THANOS_VERSION"} {
		path, err := alerting.PinnedBinary(bin)
		if err != nil {
			t.Fatal(err)
		}
		out := run(t, "", nil, path, "--version")
		if want := "version " + pins[key] + " "; !strings.Contains(out, want) {
			t.Errorf("%s --version does not say %q:\n%s", path, want, out)
		}
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Prometheus " + pins["PROMETHEUS_VERSION"], "Alertmanager " + pins["ALERTMANAGER_VERSION"], "Grafana " + pins["GRAFANA_VERSION"], "Thanos " + pins["THANOS_VERSION"]} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md does not name %q (deploy/versions.env)", want)
		}
	}
	img := service(t, p, "node-exporter").Image
	v := debianVersion(t, "prometheus-node-exporter")
	if upstream := regexp.MustCompile(`^[0-9.]+`).FindString(v); imageTag(img) != upstream {
		t.Errorf("node-exporter: image %s, but the native stack's prometheus-node-exporter is %s", img, v)
	}
	// The libvirt exporter image installs the Debian package itself, at a
	// pinned version: the one installed here.
	df := dockerfileOf(service(t, p, "libvirt-exporter"))
	b, err := os.ReadFile(df)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`prometheus-libvirt-exporter=(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s does not pin prometheus-libvirt-exporter=VERSION", df)
	}
	if v := debianVersion(t, "prometheus-libvirt-exporter"); string(m[1]) != v {
		t.Errorf("%s pins prometheus-libvirt-exporter %s, the native stack has %s", df, m[1], v)
	}
}

// imageTag is an image's tag without a leading v (prom/prometheus:v3.16.0: 3.16.0).
func imageTag(img string) string {
	return strings.TrimPrefix(img[strings.LastIndex(img, ":")+1:], "v")
}

// debianVersion is the installed version of a Debian package.
func debianVersion(t testing.TB, pkg string) string {
	t.Helper()
	out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", pkg).Output()
	if err != nil || len(out) == 0 {
		t.Fatalf("Debian package %s is not installed (make deps): %v", pkg, err)
	}
	return string(out)
}

// TestComposeHealthchecks: every service has a healthcheck that runs a
// command in its image.
func TestComposeHealthchecks(t *testing.T) {
	p := loadCompose(t)
	for name, s := range p.Services {
		h := s.HealthCheck
		switch {
		case h == nil:
			t.Errorf("%s: no healthcheck", name)
		case h.Disable || len(h.Test) < 2 || h.Test[0] == "NONE":
			t.Errorf("%s: healthcheck disabled (%v)", name, h.Test)
		case h.Interval == nil || h.Timeout == nil || h.Retries == nil:
			t.Errorf("%s: healthcheck without interval, timeout and retries", name)
		}
	}
}

// TestComposeLeastPrivilege: nothing privileged; every service drops all
// capabilities and may not gain any (no-new-privileges); the confinement
// of the default seccomp and AppArmor profiles stays on; every bind mount
// of the host is read-only. fspair-exporter is given back exactly the
// capabilities the exporter checks for at start, sees the host's
// processes, and has its mounts.
func TestComposeLeastPrivilege(t *testing.T) {
	p := loadCompose(t)
	for name, s := range p.Services {
		if s.Privileged {
			t.Errorf("%s: privileged", name)
		}
		if !slices.Contains(s.CapDrop, "ALL") {
			t.Errorf("%s: cap_drop %v, want ALL", name, s.CapDrop)
		}
		if !slices.Contains(s.SecurityOpt, "no-new-privileges:true") {
			t.Errorf("%s: security_opt %v lacks no-new-privileges:true", name, s.SecurityOpt)
		}
		for _, o := range s.SecurityOpt {
			if strings.HasSuffix(o, "unconfined") || strings.HasPrefix(o, "label") && strings.Contains(o, "disable") {
				t.Errorf("%s: security_opt %s", name, o)
			}
		}
		if s.NetworkMode == "host" {
			t.Errorf("%s: network_mode host", name)
		}
		if len(s.Devices) > 0 {
			t.Errorf("%s: devices %v", name, s.Devices)
		}
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind && !v.ReadOnly {
				t.Errorf("%s: bind mount %s is writable", name, v.String())
			}
		}
	}

	ex := service(t, p, "fspair-exporter")
	// The start-up set without the optional part (privilege.Stats:
	// CAP_SYS_ADMIN for BPF run-time statistics), for a configuration with
	// /proc discovery, which compose.yaml keeps on.
	want := privilege.Startup(privilege.Runtime(true)) &^ privilege.Stats
	var got []string
	for _, c := range ex.CapAdd {
		got = append(got, "CAP_"+strings.TrimPrefix(strings.ToUpper(c), "CAP_"))
	}
	sort.Strings(got)
	wantNames := strings.Split(want.String(), ",")
	sort.Strings(wantNames)
	if !slices.Equal(got, wantNames) {
		t.Errorf("fspair-exporter: cap_add %v, want exactly %v (exporter/privilege)", got, wantNames)
	}
	if ex.Pid != "host" {
		t.Errorf("fspair-exporter: pid %q, want host (/proc discovery of QEMU processes)", ex.Pid)
	}
	if !ex.ReadOnly {
		t.Errorf("fspair-exporter: root file system writable; the exporter writes nothing")
	}
	if u := ex.Ulimits["memlock"]; u == nil || u.Single != -1 && (u.Soft != -1 || u.Hard != -1) {
		t.Errorf("fspair-exporter: memlock ulimit %+v, want -1 (BPF maps on kernels before 5.11 without CAP_SYS_RESOURCE)", u)
	}
	mounts := map[string]types.ServiceVolumeConfig{}
	for _, v := range ex.Volumes {
		mounts[v.Target] = v
	}
	for target, why := range map[string]string{
		"/sys/kernel/tracing":     "tracepoint ids",
		"/run/libvirt":            "libvirt's read-only socket and pid files",
		"/var/lib/libvirt/images": "the images at their host paths (FSPAIR_IMAGES_DIR's default)",
	} {
		v, ok := mounts[target]
		if !ok {
			t.Errorf("fspair-exporter: no mount at %s (%s)", target, why)
			continue
		}
		if v.Source != target {
			t.Errorf("fspair-exporter: %s mounted from %s, want the same host path", target, v.Source)
		}
	}
	// The libvirt socket the exporter is told is in the mounted directory.
	if !slices.Contains(ex.Command, "--discovery.libvirt.socket=/run/libvirt/libvirt-sock-ro") {
		t.Errorf("fspair-exporter: command %v does not name the mounted libvirt socket", ex.Command)
	}
}

// TestComposeMountedFilesExist: every file or directory compose.yaml
// mounts or builds from the repository exists.
func TestComposeMountedFilesExist(t *testing.T) {
	p := loadCompose(t)
	root := repoRoot(t)
	n := 0
	for name, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind || !strings.HasPrefix(v.Source, root+"/") {
				continue
			}
			n++
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s: mounts %s, which does not exist", name, v.Source)
			}
		}
		if s.Build != nil {
			n++
			if _, err := os.Stat(dockerfileOf(s)); err != nil {
				t.Errorf("%s: builds from %s: %v", name, dockerfileOf(s), err)
			}
			checkDockerfileCopies(t, name, s)
		}
	}
	if n < 6 {
		t.Errorf("only %d repository files mounted or built; compose.yaml resolved wrongly?", n)
	}
}

// checkDockerfileCopies: the sources of the Dockerfile's COPY lines (other
// than --from copies) exist in the build context and, where the context
// has a .dockerignore, are among the paths it lets through (it is written
// as an allow list: "*", then "!path" lines).
func checkDockerfileCopies(t *testing.T, name string, s types.ServiceConfig) {
	t.Helper()
	b, err := os.ReadFile(dockerfileOf(s))
	if err != nil {
		return
	}
	var allowed []string
	ignore, err := os.ReadFile(filepath.Join(s.Build.Context, ".dockerignore"))
	hasIgnore := err == nil
	for _, line := range strings.Split(string(ignore), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "!"); ok {
			allowed = append(allowed, strings.TrimSuffix(p, "/"))
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 || !strings.EqualFold(fields[0], "COPY") || strings.HasPrefix(fields[1], "--from") {
			continue
		}
		for _, src := range fields[1 : len(fields)-1] {
			if _, err := os.Stat(filepath.Join(s.Build.Context, src)); err != nil {
				t.Errorf("%s: %s copies %s, missing from the build context %s", name, dockerfileOf(s), src, s.Build.Context)
			}
			if hasIgnore && !slices.Contains(allowed, strings.TrimSuffix(src, "/")) {
				t.Errorf("%s: %s copies %s, which %s/.dockerignore leaves out", name, dockerfileOf(s), src, s.Build.Context)
			}
		}
	}
}

// mountedAt returns the host path compose mounts at target in service s.
func mountedAt(t testing.TB, s types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Target == target {
			return v.Source
		}
	}
	t.Fatalf("%s mounts nothing at %s", s.Name, target)
	return ""
}

// flagValue returns the value of --name=value in a command.
func flagValue(t testing.TB, s types.ServiceConfig, name string) string {
	t.Helper()
	for _, a := range s.Command {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	t.Fatalf("%s: command %v has no --%s", s.Name, s.Command, name)
	return ""
}

// containerView lays out in a temporary directory what service s sees
// under dir: a link at each mount target below dir to the mount's source.
// It returns the directory standing for /.
func containerView(t testing.TB, s types.ServiceConfig, dir string) string {
	t.Helper()
	root := t.TempDir()
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind || !strings.HasPrefix(v.Target, dir+"/") {
			continue
		}
		at := filepath.Join(root, v.Target)
		if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(v.Source, at); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestComposePrometheusConfig: Prometheus's configuration as the container
// sees it (prometheus.yml, the compose targets, the rules) passes
// `promtool check config`, which checks the rule files and the target
// files too; every target file it names is there, with targets that are
// services of compose.yaml.
func TestComposePrometheusConfig(t *testing.T) {
	promtool := pinnedBinary(t, "promtool")
	p := loadCompose(t)
	prom := service(t, p, "prometheus")
	cfg := flagValue(t, prom, "config.file")
	view := containerView(t, prom, filepath.Dir(cfg))
	file := filepath.Join(view, cfg)
	out := run(t, "", nil, promtool, "check", "config", file)

	// promtool finds no rule file in an empty glob and no error in a
	// missing target file: count both here.
	rules, _ := filepath.Glob(filepath.Join(repoRoot(t), "rules", "*.yml"))
	if !strings.Contains(out, fmt.Sprintf("SUCCESS: %d rule files found", len(rules))) || len(rules) == 0 {
		t.Errorf("promtool did not check the %d rule files of rules/:\n%s", len(rules), out)
	}
	checkTargets(t, p, file)
}

// checkTargets reads the file_sd files prometheus.yml names (relative to
// its directory) and checks each target host is a compose service (or
// Prometheus itself), and that every job has its file.
func checkTargets(t *testing.T, p *types.Project, promFile string) {
	t.Helper()
	b, err := os.ReadFile(promFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Alerting struct {
			Alertmanagers []struct {
				FileSD []struct {
					Files []string `yaml:"files"`
				} `yaml:"file_sd_configs"`
			} `yaml:"alertmanagers"`
		} `yaml:"alerting"`
		ScrapeConfigs []struct {
			Job    string `yaml:"job_name"`
			FileSD []struct {
				Files []string `yaml:"files"`
			} `yaml:"file_sd_configs"`
			Static []any `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("parse %s: %v", promFile, err)
	}
	var files []string
	for _, am := range cfg.Alerting.Alertmanagers {
		for _, sd := range am.FileSD {
			files = append(files, sd.Files...)
		}
	}
	jobs := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		jobs[sc.Job] = true
		if len(sc.Static) > 0 {
			t.Errorf("job %s has static targets: the two stacks' addresses differ, use its targets file", sc.Job)
		}
		if len(sc.FileSD) == 0 {
			t.Errorf("job %s has no targets file", sc.Job)
		}
		for _, sd := range sc.FileSD {
			files = append(files, sd.Files...)
		}
	}
	for _, j := range []string{"fspair", "node", "libvirt", "prometheus", "alertmanager"} {
		if !jobs[j] {
			t.Errorf("prometheus.yml has no job %s", j)
		}
	}
	for _, f := range files {
		path := filepath.Join(filepath.Dir(promFile), f)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("targets file %s: %v", f, err)
			continue
		}
		var groups []struct {
			Targets []string `yaml:"targets"`
		}
		if err := yaml.Unmarshal(b, &groups); err != nil {
			t.Errorf("targets file %s: %v", f, err)
			continue
		}
		if len(groups) == 0 {
			t.Errorf("targets file %s lists no target", f)
		}
		for _, g := range groups {
			for _, target := range g.Targets {
				host, port, ok := strings.Cut(target, ":")
				if _, err := strconv.Atoi(port); !ok || err != nil {
					t.Errorf("targets file %s: %q is not host:port", f, target)
				}
				if host == "localhost" && f == "targets/prometheus.yml" {
					continue
				}
				if _, ok := p.Services[host]; !ok {
					t.Errorf("targets file %s: %s is no service of compose.yaml", f, target)
				}
			}
		}
	}
}

// TestComposeAlertmanagerConfig: the Alertmanager configuration compose
// mounts passes `amtool check-config`.
func TestComposeAlertmanagerConfig(t *testing.T) {
	amtool := pinnedBinary(t, "amtool")
	p := loadCompose(t)
	am := service(t, p, "alertmanager")
	src := mountedAt(t, am, flagValue(t, am, "config.file"))
	out := run(t, "", nil, amtool, "check-config", src)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("amtool check-config %s:\n%s", src, out)
	}
}

// TestComposeGrafana: Grafana's provisioning is mounted and agrees with
// compose.yaml: its Prometheus data source is the prometheus service, its
// dashboards provider reads the directory the dashboards are mounted in,
// and every dashboard of dashboards/ is mounted there.
func TestComposeGrafana(t *testing.T) {
	p := loadCompose(t)
	root := repoRoot(t)
	g := service(t, p, "grafana")
	prov := mountedAt(t, g, "/etc/grafana/provisioning")
	// Grafana expands $VAR and ${VAR} in provisioning files from its
	// environment.
	expand := func(s string) string {
		return os.Expand(s, func(k string) string {
			if v := g.Environment[k]; v != nil {
				return *v
			}
			t.Errorf("grafana: provisioning uses $%s, which compose.yaml does not set", k)
			return ""
		})
	}

	// Data sources.
	dsFiles := yamlFiles(t, filepath.Join(prov, "datasources"))
	var promDS int
	for _, f := range dsFiles {
		var c struct {
			Datasources []struct {
				Name, Type, URL string
			} `yaml:"datasources"`
		}
		readYAML(t, f, &c)
		for _, d := range c.Datasources {
			if d.Type != "prometheus" {
				continue
			}
			promDS++
			u := expand(d.URL)
			host := strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
			host, _, _ = strings.Cut(host, "/")
			if host != "prometheus:9090" {
				t.Errorf("%s: data source %s at %s, want http://prometheus:9090 (the compose service)", f, d.Name, u)
			}
		}
	}
	if promDS == 0 {
		t.Errorf("no Prometheus data source in %s/datasources", prov)
	}

	// Dashboards: mounted one by one into one directory.
	mountedDirs := map[string]bool{}
	mounted := map[string]bool{}
	for _, v := range g.Volumes {
		if strings.HasSuffix(v.Source, ".json") && strings.HasPrefix(v.Source, filepath.Join(root, "dashboards")+"/") {
			mounted[filepath.Base(v.Source)] = true
			mountedDirs[filepath.Dir(v.Target)] = true
		}
	}
	want, _ := filepath.Glob(filepath.Join(root, "dashboards", "*.json"))
	if len(want) == 0 {
		t.Errorf("no dashboards/*.json")
	}
	for _, f := range want {
		if !mounted[filepath.Base(f)] {
			t.Errorf("dashboard %s is not mounted into grafana", filepath.Base(f))
		}
	}
	var paths []string
	for _, f := range yamlFiles(t, filepath.Join(prov, "dashboards")) {
		var c struct {
			Providers []struct {
				Name    string `yaml:"name"`
				Type    string `yaml:"type"`
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		readYAML(t, f, &c)
		for _, pr := range c.Providers {
			paths = append(paths, filepath.Clean(expand(pr.Options.Path)))
		}
	}
	if len(paths) == 0 {
		t.Errorf("no dashboards provider in %s/dashboards", prov)
	}
	for _, path := range paths {
		if !mountedDirs[path] {
			t.Errorf("dashboards provider reads %s; compose.yaml mounts the dashboards in %v", path, mountedDirs)
		}
	}
}

func yamlFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{"*.yml", "*.yaml"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		out = append(out, m...)
	}
	if len(out) == 0 {
		t.Errorf("no YAML file in %s", dir)
	}
	return out
}

func readYAML(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
}
