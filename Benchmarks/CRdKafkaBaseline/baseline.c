#include "CRdKafkaBaseline.h"
