package timeline

import (
	"bytes"
	"encoding/json"
	"fmt"

	"swapagent/trace"
)

// Fault is one KindFault event, decoded once: the agent's JSON verbatim, its fields for renderers that
// show every key, and the typed record for readers that reason about it.
type Fault struct {
	TS     int64
	Raw    json.RawMessage // the record; a text that is not JSON is kept as a JSON string
	Fields map[string]any  // nil when the text is not a JSON object; numbers as json.Number
	Record trace.Fault     // the fields a diagnosis uses (zero where Err is set)
	Err    error           // why the text is not a fault record, nil when it is
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
		f.Record = trace.Fault{}
	}
	return f
}
