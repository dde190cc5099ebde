/* Fixture: x.h and y.h include each other (the planted circle) */
#ifndef X_H_
#define X_H_
#include "y.h"
#endif
