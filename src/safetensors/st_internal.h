/* What the reader may take from a parsed safetensors file. */
#ifndef TZR_ST_INTERNAL_H
#define TZR_ST_INTERNAL_H
#include "mem.h"
#include "tzr_safetensors.h"

/* Move the memory holding every tensor's name and shape into `into`:
 * those pointers then live as long as `into`, not f. Nothing else of f
 * changes; tzr_st_find, tzr_st_get stay valid only while both live. */
TZR_HIDDEN void tzr_st_take_strings(tzr_st_file *f, tzr_arena *into);
#endif
