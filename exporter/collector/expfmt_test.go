package collector

import (
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

func expfmtWrite(w io.Writer, mf *dto.MetricFamily) (int, error) {
	return expfmt.MetricFamilyToText(w, mf)
}
