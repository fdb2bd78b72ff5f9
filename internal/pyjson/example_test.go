package pyjson_test

import (
	"fmt"

	"github.com/gonixl/gonixl/internal/pyjson"
)

func ExampleQuote() {
	fmt.Println(pyjson.Quote("café \U0001F600 \"x\"\n", true))
	fmt.Println(pyjson.Quote("café \U0001F600 \"x\"\n", false))
	// Output:
	// "caf\u00e9 \ud83d\ude00 \"x\"\n"
	// "café 😀 \"x\"\n"
}
