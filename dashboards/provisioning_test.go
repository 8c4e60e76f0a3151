package dashboards

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fspair/fspair/tests/alerting"
)

// TestProvisioning checks deploy/grafana/provisioning against what the
// dashboards need: a default Prometheus data source (their $datasource
// variable lists Prometheus data sources and opens on the default) at the
// stack's URL, and a read-only file provider over the generated files.
// No Grafana can run here; the stacks' tests load the files for real.
func TestProvisioning(t *testing.T) {
	root, err := alerting.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "deploy", "grafana", "provisioning")

	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name, UID, Type, URL string
			IsDefault            bool `yaml:"isDefault"`
			JSONData             struct {
				TimeInterval string `yaml:"timeInterval"`
			} `yaml:"jsonData"`
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(dir, "datasources", "fspair.yaml"), &ds)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 {
		t.Fatalf("datasources/fspair.yaml: apiVersion %d, %d data sources; want 1 and 1", ds.APIVersion, len(ds.Datasources))
	}
	d := ds.Datasources[0]
	if d.Type != "prometheus" || !d.IsDefault || d.UID == "" || d.URL != "${PROMETHEUS_URL}" {
		t.Errorf("data source %+v: want a default prometheus with a uid, at ${PROMETHEUS_URL}", d)
	}
	if _, err := time.ParseDuration(d.JSONData.TimeInterval); err != nil {
		t.Errorf("data source timeInterval %q (the scrape interval, floor of $__rate_interval): %v", d.JSONData.TimeInterval, err)
	}

	var dp struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name, Type, Folder string
			AllowUIUpdates     bool `yaml:"allowUiUpdates"`
			Options            struct {
				Path string
			}
		}
	}
	readYAML(t, filepath.Join(dir, "dashboards", "fspair.yaml"), &dp)
	if dp.APIVersion != 1 || len(dp.Providers) != 1 {
		t.Fatalf("dashboards/fspair.yaml: apiVersion %d, %d providers; want 1 and 1", dp.APIVersion, len(dp.Providers))
	}
	p := dp.Providers[0]
	if p.Type != "file" || p.AllowUIUpdates || p.Options.Path != "${FSPAIR_DASHBOARDS_DIR}" {
		t.Errorf("provider %+v: want a read-only file provider over ${FSPAIR_DASHBOARDS_DIR}", p)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
}
