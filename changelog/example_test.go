package changelog_test

import (
	"fmt"
	"io"
	"log"
	"strings"

	"github.com/apache/iceberg-go"

	"github.com/icesink/icesink/changelog"
)

// Decoding changelog-json lines into typed changes; a bad line names its
// line number and field.
func ExampleNewDecoder() {
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "amount", Type: iceberg.DecimalTypeOf(10, 2)})
	input := `{"op":"+I","data":{"id":1,"amount":"12.50"}}
{"op":"-D","data":{"id":1}}
{"op":"+I","data":{"id":"two"}}
`
	dec, err := changelog.NewDecoder(strings.NewReader(input), changelog.ChangelogJSON, schema)
	if err != nil {
		log.Fatal(err)
	}
	for {
		rec, err := dec.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println("error:", err)
			break
		}
		for _, ch := range rec.Changes {
			fmt.Println(rec.Line, ch.Op, ch.Row[0])
		}
	}
	// Output:
	// 1 +I 1
	// 2 -D 1
	// error: line 3: field "id": long needs a JSON number or a string holding one, got the string "two"
}
