/* What a file is, from its first bytes: the two formats the reader takes,
 * and the ones users hand it by mistake, so the message can say so. */
#include "format.h"

#include <string.h>

int tzr_sniff_format(const uint8_t *head, size_t len, uint64_t size) {
    if (size == 0) return TZR_FORMAT_EMPTY;
    if (len >= TZR_MAGIC_LEN && memcmp(head, TZR_MAGIC, TZR_MAGIC_LEN) == 0) return TZR_FORMAT_TENSORIZER;
    if (len >= 9 && size >= 10) {
        uint64_t n = tzr_ld64(head);
        if (n >= 2 && n <= size - 8 && head[8] == '{') return TZR_FORMAT_SAFETENSORS;
    }
    /* A length and a JSON object after it, but fewer bytes than the length
     * says: a cut copy, which "bad magic" would misdescribe. */
    if (len >= 9 && head[8] == '{' && tzr_ld64(head) >= 2 && tzr_ld64(head) > size - 8) return TZR_FORMAT_ST_CUT;
    if (len >= 4 && memcmp(head, "PK\x03\x04", 4) == 0) return TZR_FORMAT_ZIP;
    if (len >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5) return TZR_FORMAT_PICKLE;
    if (len >= 4 && memcmp(head, "GGUF", 4) == 0) return TZR_FORMAT_GGUF;
    if (len >= 6 && memcmp(head, "\x93NUMPY", 6) == 0) return TZR_FORMAT_NUMPY;
    size_t i = 0;
    while (i < len && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t')) i++;
    if (i < len && (head[i] == '{' || head[i] == '[')) return TZR_FORMAT_JSON;
    return TZR_FORMAT_UNKNOWN;
}

const char *tzr_format_what(int kind) {
    switch (kind) {
    case TZR_FORMAT_TENSORIZER: return "a tensorizer .tensors file";
    case TZR_FORMAT_SAFETENSORS: return "a safetensors file";
    case TZR_FORMAT_EMPTY: return "offset 0: empty file (0 bytes), not a tensorizer or safetensors file";
    case TZR_FORMAT_ZIP:
        return "this is a zip archive (a torch.save checkpoint?), not a tensorizer or safetensors file: load it "
               "with torch.load and write it with tzr.TensorSerializer, or save it as safetensors";
    case TZR_FORMAT_PICKLE:
        return "this is a Python pickle (a legacy torch.save checkpoint?), not a tensorizer or safetensors file: "
               "load it with torch.load and write it with tzr.TensorSerializer, or save it as safetensors";
    case TZR_FORMAT_GGUF: return "this is a GGUF file (llama.cpp), which libtzr does not read";
    case TZR_FORMAT_NUMPY: return "this is a NumPy .npy file, which libtzr does not read";
    case TZR_FORMAT_JSON:
        return "this is a JSON file: give it where a shard manifest (.tzr-index.json) or a Hugging Face "
               "model.safetensors.index.json goes";
    default: return "offset 0: bad magic (not a tensorizer .tensors file, nor a safetensors file)";
    }
}
