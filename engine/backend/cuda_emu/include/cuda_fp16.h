// Emulated-device stand-in for the toolkit header of the same name (engine/backend/cuda_emu/half.h).
#pragma once
#include "engine/backend/cuda_emu/half.h"
