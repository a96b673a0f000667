/*
 * st_internal.h - shared by src/formats/{st,ckpt,st_writer}.c. The name ->
 * index hash table and the strict UTF-8 check they use are public now
 * (lynn/util.h, lynn/utf8.h). Not part of the public API.
 */
#ifndef LYNN_ST_INTERNAL_H
#define LYNN_ST_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lynn/utf8.h"
#include "lynn/util.h"

#endif
