// The same dump compiled as C++ (adds the type of every function).
#include "layout_dump.c"
