package timeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"swapagent/acllog"
)

// Fault is one KindFault event, decoded once: the agent's JSON verbatim, its fields for renderers that
// show every key, and the typed record for readers that reason about it.
type Fault struct {
	TS     int64
	Raw    json.RawMessage // the record; a text that is not JSON is kept as a JSON string
	Fields map[string]any  // nil when the text is not a JSON object; numbers as json.Number
	Record FaultRecord     // the fields a diagnosis uses (zero where Err is set)
	Err    error           // why the text is not a fault record, nil when it is
}

// FaultRecord is the JSON the agent writes in a KindFault event's Text (docs/doctor.md). Numbers may
// also be written as "0x..." strings.
type FaultRecord struct {
	Kernel        string `json:"kernel"`
	Addr          Uint   `json:"addr"`
	Size          Uint   `json:"size"`
	Storage       Uint   `json:"storage"`
	Generation    Uint   `json:"generation"`
	Handle        int64  `json:"handle"`
	Nbytes        Uint   `json:"nbytes"`
	Arg           string `json:"arg,omitempty"`            // the argument accessed, when named
	Tensor        string `json:"tensor,omitempty"`         // its dtype and shape
	StorageTensor string `json:"storage_tensor,omitempty"` // the storage's dtype and shape
	ReleasedBy    string `json:"released_by"`
	Owner         string `json:"owner"`
	KeepReason    string `json:"keep_reason"`
	Detected      string `json:"detected"`
	Code          int    `json:"code"`
	TensorIndex   *int   `json:"tensor_index"`
	Repeats       uint64 `json:"repeats,omitempty"`
	Detail        string `json:"detail,omitempty"`
}

// Uint is an unsigned JSON number that may also be written as a decimal or "0x" string; "0xADDR#GEN"
// (a storage's name) reads as its address.
type Uint uint64

// UnmarshalJSON reads a number, a decimal or "0x" string, or null (zero).
func (u *Uint) UnmarshalJSON(b []byte) error {
	s, _, _ := strings.Cut(strings.Trim(string(b), `"`), "#")
	if s == "null" || s == "" {
		return nil
	}
	v, ok := acllog.ParseUint(s)
	if !ok {
		return fmt.Errorf("not an unsigned integer: %.40s", s)
	}
	*u = Uint(v)
	return nil
}

// decodeFault reads one KindFault text.
func decodeFault(ts int64, text string) Fault {
	f := Fault{TS: ts, Raw: json.RawMessage(text)}
	if !json.Valid(f.Raw) {
		f.Raw, _ = json.Marshal(text) // keep a non-JSON record as a JSON string
		f.Err = fmt.Errorf("fault record is not JSON")
		return f
	}
	d := json.NewDecoder(bytes.NewReader(f.Raw))
	d.UseNumber()           // addresses do not fit a float64
	_ = d.Decode(&f.Fields) // stays nil unless it is an object
	f.Err = json.Unmarshal(f.Raw, &f.Record)
	if f.Err != nil {
		f.Record = FaultRecord{}
	}
	return f
}
