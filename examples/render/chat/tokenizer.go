package chat

import (
	"fmt"
	"strings"
	"sync"

	"github.com/tiktoken-go/tokenizer"
)

// AddedToken is a token the base BPE vocabulary lacks: a chat-format marker
// matched as a whole before BPE runs, as Hugging Face tokenizers match added
// tokens. Special ones are dropped from derendered text when
// skip_special_tokens is on (vLLM's default); the others (<think>,
// <tool_call>, ...) stay, because the parsers read them.
type AddedToken struct {
	ID      int
	Text    string
	Special bool
}

// Qwen3AddedTokens are the ChatML and Qwen3 markers added to cl100k_base.
// <|endoftext|> keeps cl100k's id; the others follow cl100k's last special id
// (100276), so no id collides with the base vocabulary.
var Qwen3AddedTokens = []AddedToken{
	{100257, "<|endoftext|>", true},
	{100277, "<|im_start|>", true},
	{100278, "<|im_end|>", true},
	{100279, "<think>", false},
	{100280, "</think>", false},
	{100281, "<tool_call>", false},
	{100282, "</tool_call>", false},
	{100283, "<tool_response>", false},
	{100284, "</tool_response>", false},
}

// Tokenizer is a byte-level BPE vocabulary plus added tokens. It is safe for
// concurrent use.
type Tokenizer struct {
	codec   tokenizer.Codec
	name    string
	pieces  []string // id -> bytes of the token; "" where the id is unused
	added   map[string]int
	special []bool // id -> skipped by skip_special_tokens
	addedBy []AddedToken
	// first bytes of the added tokens' texts, to find candidates fast
	firstByte [256]bool
}

var (
	baseOnce  sync.Map // encoding name -> *baseVocab
	buildLock sync.Mutex
)

type baseVocab struct {
	codec  tokenizer.Codec
	pieces []string
}

// loadBase decodes every id of an embedded encoding once per process; later
// Pipelines share the table.
func loadBase(enc tokenizer.Encoding) (*baseVocab, error) {
	if v, ok := baseOnce.Load(enc); ok {
		return v.(*baseVocab), nil
	}
	buildLock.Lock()
	defer buildLock.Unlock()
	if v, ok := baseOnce.Load(enc); ok {
		return v.(*baseVocab), nil
	}
	codec, err := tokenizer.Get(enc)
	if err != nil {
		return nil, fmt.Errorf("chat: tokenizer %q: %w", enc, err)
	}
	var pieces []string
	for id, misses := uint(0), 0; misses < 64; id++ {
		s, err := codec.Decode([]uint{id})
		if err != nil {
			misses++
			pieces = append(pieces, "")
			continue
		}
		misses = 0
		pieces = append(pieces, s)
	}
	for len(pieces) > 0 && pieces[len(pieces)-1] == "" {
		pieces = pieces[:len(pieces)-1]
	}
	v := &baseVocab{codec: codec, pieces: pieces}
	baseOnce.Store(enc, v)
	return v, nil
}

// NewTokenizer builds a tokenizer over one of tiktoken-go's embedded
// encodings ("cl100k_base", "o200k_base", ...) and the given added tokens.
func NewTokenizer(encoding string, added []AddedToken) (*Tokenizer, error) {
	base, err := loadBase(tokenizer.Encoding(encoding))
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{codec: base.codec, name: encoding, added: map[string]int{}, addedBy: added}
	size := len(base.pieces)
	for _, a := range added {
		if a.ID+1 > size {
			size = a.ID + 1
		}
	}
	t.pieces = make([]string, size)
	copy(t.pieces, base.pieces)
	t.special = make([]bool, size)
	for _, a := range added {
		if a.ID < 0 || a.Text == "" {
			return nil, fmt.Errorf("chat: added token %q with id %d: want a text and an id >= 0", a.Text, a.ID)
		}
		if _, dup := t.added[a.Text]; dup {
			return nil, fmt.Errorf("chat: added token %q listed twice", a.Text)
		}
		t.added[a.Text] = a.ID
		t.pieces[a.ID] = a.Text
		t.special[a.ID] = a.Special
		t.firstByte[a.Text[0]] = true
	}
	return t, nil
}

// VocabSize is one more than the largest id.
func (t *Tokenizer) VocabSize() int { return len(t.pieces) }

// TokenID returns the id of an added token's text.
func (t *Tokenizer) TokenID(text string) (int, bool) {
	id, ok := t.added[text]
	return id, ok
}

// Piece returns the bytes of one token ("" for an id outside the vocabulary).
func (t *Tokenizer) Piece(id int) string {
	if id < 0 || id >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// IsSpecial says whether skip_special_tokens drops the id.
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// Valid says whether the id names a token.
func (t *Tokenizer) Valid(id int) bool {
	return id >= 0 && id < len(t.pieces) && t.pieces[id] != ""
}

// Encode splits text at added tokens and BPE-encodes the text between them.
func (t *Tokenizer) Encode(text string) []int {
	out := make([]int, 0, len(text)/3+1)
	start := 0
	for i := 0; i < len(text); i++ {
		if !t.firstByte[text[i]] {
			continue
		}
		for _, a := range t.addedBy {
			if strings.HasPrefix(text[i:], a.Text) {
				out = t.encodeOrdinary(out, text[start:i])
				out = append(out, a.ID)
				i += len(a.Text) - 1
				start = i + 1
				break
			}
		}
	}
	return t.encodeOrdinary(out, text[start:])
}

func (t *Tokenizer) encodeOrdinary(out []int, s string) []int {
	if s == "" {
		return out
	}
	ids, _, err := t.codec.Encode(s)
	if err != nil {
		// The codec only fails in its strict UTF-8 mode, which we never set;
		// fall back to bytes so no input is lost.
		for i := 0; i < len(s); i++ {
			if id, ok := t.byteID(s[i]); ok {
				out = append(out, id)
			}
		}
		return out
	}
	for _, id := range ids {
		out = append(out, int(id))
	}
	return out
}

func (t *Tokenizer) byteID(b byte) (int, bool) {
	ids, _, err := t.codec.Encode(string([]byte{b}))
	if err != nil || len(ids) != 1 {
		return 0, false
	}
	return int(ids[0]), true
}

// Decode concatenates the tokens' bytes, dropping special tokens when
// skipSpecial is set; invalid UTF-8 becomes U+FFFD as in Hugging Face's
// decode. Unknown ids are an error naming the first.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		if !t.Valid(id) {
			return "", fmt.Errorf("token id %d is outside the vocabulary (size %d)", id, len(t.pieces))
		}
		if skipSpecial && t.special[id] {
			continue
		}
		b.WriteString(t.pieces[id])
	}
	return strings.ToValidUTF8(b.String(), "\uFFFD"), nil
}
