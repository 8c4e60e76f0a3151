package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestComposeFleetConfig: the lab fleet's configuration as compose.yaml
// mounts it. Each host's Prometheus passes `promtool check config` with its
// host's name in the environment (its one rule file, the per-host rules, and
// its targets); the hosts have distinct names; every target and Thanos Query
// endpoint is a service of compose.yaml, Query's endpoints being every
// sidecar and the Ruler; the Ruler's rule file passes `thanos tools
// rules-check` and the Ruler reaches Query and the Alertmanager.
func TestComposeFleetConfig(t *testing.T) {
	promtool := pinnedBinary(t, "promtool")
	thanos := pinnedBinary(t, "thanos")
	p := loadCompose(t)
	names := map[string]bool{}
	for _, h := range fleetHosts {
		prom := service(t, p, "fleet-prometheus-"+h)
		host := prom.Environment["FSPAIR_HOST"]
		if host == nil || *host == "" || names[*host] {
			t.Errorf("%s: FSPAIR_HOST %v: each host needs its own name (the host external label)", prom.Name, host)
		} else {
			names[*host] = true
		}
		cfg := flagValue(t, prom, "config.file")
		view := containerView(t, prom, filepath.Dir(cfg))
		file := filepath.Join(view, cfg)
		out := run(t, "", []string{"FSPAIR_HOST=" + h}, promtool, "check", "config", file)
		if !strings.Contains(out, "SUCCESS: 1 rule files found") || !strings.Contains(out, "fspair-host.rules.yml") {
			t.Errorf("%s: promtool did not check the per-host rules:\n%s", prom.Name, out)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "host: ${FSPAIR_HOST}") {
			t.Errorf("%s: %s does not set the host external label from FSPAIR_HOST", prom.Name, cfg)
		}
		for _, f := range []string{"targets/fspair.yml", "targets/alertmanager.yml"} {
			for _, target := range targetHosts(t, filepath.Join(filepath.Dir(file), f)) {
				if _, ok := p.Services[target]; !ok {
					t.Errorf("%s: %s names %s, no service of compose.yaml", prom.Name, f, target)
				}
			}
		}
		side := service(t, p, "fleet-sidecar-"+h)
		if want := "http://" + prom.Name + ":9090"; flagValue(t, side, "prometheus.url") != want {
			t.Errorf("%s: --prometheus.url %s, want %s", side.Name, flagValue(t, side, "prometheus.url"), want)
		}
	}

	q := service(t, p, "thanos-query")
	b, err := os.ReadFile(mountedAt(t, q, flagValue(t, q, "endpoint.sd-config-file")))
	if err != nil {
		t.Fatal(err)
	}
	var sd struct {
		Endpoints []struct {
			Address string `yaml:"address"`
		} `yaml:"endpoints"`
	}
	if err := yaml.Unmarshal(b, &sd); err != nil {
		t.Fatalf("parse Thanos Query's endpoints: %v", err)
	}
	var got []string
	for _, e := range sd.Endpoints {
		got = append(got, e.Address)
	}
	want := []string{"thanos-ruler:10901"}
	for _, h := range fleetHosts {
		want = append(want, "fleet-sidecar-"+h+":10901")
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Thanos Query's endpoints %v, want every sidecar and the Ruler %v", got, want)
	}

	r := service(t, p, "thanos-ruler")
	rules := mountedAt(t, r, flagValue(t, r, "rule-file"))
	out := run(t, "", nil, thanos, "tools", "rules-check", "--rules="+rules)
	if !strings.Contains(out, "result=SUCCESS") {
		t.Errorf("thanos tools rules-check %s:\n%s", rules, out)
	}
	for flag, want := range map[string]string{"query": "thanos-query:10902", "alertmanagers.url": "http://alertmanager:9093"} {
		if got := flagValue(t, r, flag); got != want {
			t.Errorf("thanos-ruler: --%s=%s, want %s", flag, got, want)
		}
	}
}

// targetHosts reads a file_sd file and returns its targets' host names.
func targetHosts(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("targets file: %v", err)
	}
	var groups []struct {
		Targets []string `yaml:"targets"`
	}
	if err := yaml.Unmarshal(b, &groups); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	var out []string
	for _, g := range groups {
		for _, target := range g.Targets {
			host, _, ok := strings.Cut(target, ":")
			if !ok {
				t.Errorf("%s: target %q is not host:port", path, target)
			}
			out = append(out, host)
		}
	}
	if len(out) == 0 {
		t.Errorf("%s lists no target", path)
	}
	return out
}
