package alerting

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestDeriveAlertmanagerConfig checks what the test Alertmanager keeps of
// the example: routes, matchers and inhibit rules as they are; timing and
// receivers' destinations replaced; silent receivers left silent.
func TestDeriveAlertmanagerConfig(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(root, "deploy", "alertmanager", "alertmanager.yml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := deriveAlertmanagerConfig(example, "http://127.0.0.1:1", Timing{time.Second, 2 * time.Second, time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var in, got map[string]any
	if err := yaml.Unmarshal(example, &in); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if a, b := dump(t, in["inhibit_rules"]), dump(t, got["inhibit_rules"]); a != b {
		t.Errorf("inhibit rules changed:\n%s\nwant:\n%s", b, a)
	}
	r := got["route"].(map[string]any)
	if r["group_wait"] != "1s" || r["group_interval"] != "2s" || r["repeat_interval"] != "3600s" {
		t.Errorf("root timing %v %v %v", r["group_wait"], r["group_interval"], r["repeat_interval"])
	}
	if dump(t, r["group_by"]) != dump(t, in["route"].(map[string]any)["group_by"]) {
		t.Errorf("group_by changed: %v", r["group_by"])
	}
	for _, k := range r["routes"].([]any) {
		k := k.(map[string]any)
		if _, ok := k["group_wait"]; ok && k["group_wait"] != "1s" {
			t.Errorf("child route %v keeps group_wait %v", k["matchers"], k["group_wait"])
		}
	}
	hooks := 0
	for _, rc := range got["receivers"].([]any) {
		rc := rc.(map[string]any)
		name := rc["name"].(string)
		wh, ok := rc["webhook_configs"].([]any)
		if name == "fspair-null" {
			if ok {
				t.Errorf("silent receiver %s got a webhook", name)
			}
			continue
		}
		if !ok || len(wh) != 1 {
			t.Errorf("receiver %s: webhook_configs %v", name, rc["webhook_configs"])
			continue
		}
		if u := wh[0].(map[string]any)["url"]; u != "http://127.0.0.1:1/"+name {
			t.Errorf("receiver %s sends to %v", name, u)
		}
		hooks++
	}
	if hooks != 2 {
		t.Errorf("%d receivers send, want 2 (page and work queue)", hooks)
	}
}

func dump(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestRuleOptionsWorkload: a test stack evaluates the classifier at its own
// evaluation interval unless it asks for another.
func TestRuleOptionsWorkload(t *testing.T) {
	flagOf := func(a []string) string {
		for i := range a[:len(a)-1] {
			if a[i] == "-workload-interval" {
				return a[i+1]
			}
		}
		return "(none)"
	}
	if got := flagOf(RuleOptions{}.args("out")); got != "global" {
		t.Errorf("default: -workload-interval %s, want global", got)
	}
	if got := flagOf(RuleOptions{Workload: "30s"}.args("out")); got != "30s" {
		t.Errorf("Workload 30s: -workload-interval %s, want 30s", got)
	}
}
