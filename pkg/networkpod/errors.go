package networkpod

import (
	"encoding/json"

	"github.com/containernetworking/cni/pkg/types"
)

// stderrExcerpt is how much of a failed plugin's stderr (and of its
// stdout, when that is not a CNI error object) goes into an error.
const stderrExcerpt = 2048

// parseCNIError returns the CNI error object in out, or nil when out is not one.
func parseCNIError(out []byte) *types.Error {
	var probe struct {
		Code *uint   `json:"code"`
		Msg  *string `json:"msg"`
	}
	if err := json.Unmarshal(out, &probe); err != nil || probe.Code == nil || probe.Msg == nil {
		return nil
	}
	var e types.Error
	if err := json.Unmarshal(out, &e); err != nil {
		return nil
	}
	return &e
}
