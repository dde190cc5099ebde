#ifndef Y_H_
#define Y_H_
#include "x.h"
#endif
